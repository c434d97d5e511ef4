// `moestat report FILE`: the recording as an HTML page, its figures as SVG, the heatmap as
// PNG and/or Prometheus text. `moestat report --simulation FILE`: a rebalance simulation's
// timelines as an HTML page and/or SVG.
#include <fmt/format.h>

#include <filesystem>
#include <moestat/error.hpp>
#include <moestat/io/files.hpp>
#include <moestat/report.hpp>
#include <moestat/report/simulation.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "command.hpp"
#include "output_files.hpp"
#include "plan_files.hpp"

namespace moestat::cli {
namespace {

/// The name an unnamed --placement gets (and Prometheus' label for it, as before names).
constexpr std::string_view kUnnamed = "planned";
/// Pixels per SVG unit of --png: sharp on a slide or a high-density screen.
constexpr double kPngScale = 2.0;

/// "NAME=FILE" or "FILE": an existing file is taken whole (a path may hold '=').
std::pair<std::string, std::string> split_placement_option(const std::string& value) {
  const std::size_t eq = value.find('=');
  if (eq == std::string::npos || std::filesystem::exists(value)) {
    return {std::string(kUnnamed), value};
  }
  return {value.substr(0, eq), value.substr(eq + 1)};
}

class ReportCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand(
        "report",
        "Draw a recording: an HTML page comparing placements (summary, heatmap, per-GPU loads, "
        "balancedness), its figures as SVG, the heatmap as PNG, or Prometheus metrics; or draw "
        "a rebalance simulation's timelines");
    sub_ = sub;
    sub->add_option("FILE", path_,
                    "A recording: a moestat snapshot or SGLang logical counts (.json, an SGLang "
                    ".pt dump or .safetensors). Required unless --simulation is given");
    sub->add_option("--simulation", simulation_path_,
                    "Instead of a recording, draw this simulation (what `moestat simulate "
                    "--json` writes): per scenario, each policy's balancedness over the passes "
                    "with its rebalances and the traffic's phases, and the table of lost "
                    "seconds. With --html and/or --svg only");
    sub->add_option("--placement", placement_options_,
                    "NAME=FILE: a placement (physical_to_logical_map [L][P]: .json, .pt or "
                    ".safetensors) to compare, shown as NAME; repeatable. FILE alone is named "
                    "'planned'")
        ->take_all()
        ->allow_extra_args(false);
    sub->add_option("--gpus", num_gpus_,
                    "Expert-parallel GPUs; must divide the experts and every placement's slots. "
                    "Required with --html, --svg, --prometheus or --placement")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
    sub->add_option("--nodes", options_.num_nodes,
                    "Nodes the GPUs are spread over (must divide --gpus): per-GPU charts shade "
                    "each node, the summary names the busiest")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
        ->capture_default_str();
    sub->add_option("--held-out-from", held_out_from_,
                    "First pass the placements were not planned on: they are judged on this "
                    "pass and later ones, and charts over time mark the split")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
    sub->add_option("--top", options_.top_experts, "Hottest experts listed per layer")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1000}))
        ->capture_default_str();
    sub->add_option("--html", html_path_, "Write the HTML report here");
    sub->add_option("--svg", svg_dir_,
                    "Write each figure here as NAME.svg (heatmap, gpu-load, gpu-peak-load, "
                    "layer-balancedness, pass-balancedness; with --simulation, "
                    "simulation_SCENARIO); created if missing");
    sub->add_option("--png", png_path_,
                    "Write the layers x experts heatmap here as PNG (its SVG, rasterised)");
    sub->add_flag("--prometheus", prometheus_,
                  "Print the metrics in Prometheus text exposition format");
    sub->footer(
        "At least one of --html, --svg, --png and --prometheus. The page is self-contained\n"
        "(inline SVG, no script, no network) and starts with what the recording says: which\n"
        "placement balances best and by how much, the hottest layer and expert, the busiest\n"
        "GPU and node. The identity placement (expert e on GPU e / (E / GPUs)) is always drawn\n"
        "as a reference; the best placement's gain is measured against the first --placement\n"
        "when there are two or more, else against the identity placement. --gpus has no\n"
        "default: nothing in a recording or a placement file says how many GPUs the slots are\n"
        "spread over, and a wrong count changes every per-GPU figure.\n\n"
        "Example:\n"
        "  moestat demo --out demo-out\n"
        "  moestat report demo-out/snapshot.json --gpus 32 --nodes 4 --held-out-from 32 \\\n"
        "      --placement recorded=demo-out/placement.json \\\n"
        "      --placement moestat=demo-out/placement_moestat.pt \\\n"
        "      --html demo-out/report.html --svg demo-out/figures --png demo-out/heatmap.png\n"
        "  moestat report logical_count.pt --gpus 32 --prometheus > metrics.prom\n"
        "  moestat simulate --data stats/ --json simulation.json\n"
        "  moestat report --simulation simulation.json --html simulation.html --svg figures");
    return sub;
  }

  int run() override {
    if (const std::string misused = misused_options(); !misused.empty()) {
      fmt::print(stderr, "moestat report: {}\nRun with --help for more information.\n", misused);
      return kExitUsageError;
    }
    return simulation_path_.empty() ? run_recording() : run_simulation();
  }

 private:
  int run_recording() {
    // Every output is checked, and every rendering made, before the first file is written:
    // an error writes nothing.
    const std::vector<std::filesystem::path> paths{html_path_, png_path_};
    OutputFiles outputs(paths, inputs());
    const report::Recording recording = report::load_recording(path_);
    // --png alone draws no GPU and needs no count; 1 divides every recording.
    options_.num_gpus = num_gpus_.value_or(1);
    options_.held_out_from = held_out_from_;
    for (const std::string& value : placement_options_) {
      auto [name, file] = split_placement_option(value);
      // The reader eval and plan --previous use: every placement format.
      options_.placements.push_back(
          {std::move(name),
           read_placement_file(file, {recording.num_layers(), recording.num_experts(), path_})});
    }
    try {
      options_.validate(recording);
    } catch (const Error& error) {
      // The library speaks of GPUs, nodes, passes and placements; the user gave them as
      // these options.
      throw error.with_context(option_context());
    }
    const std::string html = html_path_.empty() ? "" : report::render_html(recording, options_);
    const std::vector<report::Figure> figures = svg_dir_.empty()
                                                    ? std::vector<report::Figure>{}
                                                    : report::render_figures(recording, options_);
    const std::vector<std::uint8_t> png = png_path_.empty()
                                              ? std::vector<std::uint8_t>{}
                                              : report::render_heatmap_png(recording, kPngScale);
    write_outputs(html, figures, png);
    outputs.keep();
    if (prometheus_) fmt::print("{}", report::prometheus_text(recording, options_));
    return kExitOk;
  }

  int run_simulation() {
    const std::filesystem::path html_path(html_path_);
    OutputFiles outputs({&html_path, 1}, inputs());
    const report::Simulation simulation = report::load_simulation(simulation_path_);
    const std::string html = html_path_.empty() ? "" : report::render_simulation_html(simulation);
    const std::vector<report::Figure> figures = svg_dir_.empty()
                                                    ? std::vector<report::Figure>{}
                                                    : report::render_simulation_figures(simulation);
    write_outputs(html, figures, {});
    outputs.keep();
    return kExitOk;
  }

  /// Writes what was rendered to --html, --svg and --png (those given), having checked the
  /// figures' paths first.
  void write_outputs(const std::string& html, const std::vector<report::Figure>& figures,
                     const std::vector<std::uint8_t>& png) const {
    std::optional<OutputDirectory> svg_dir;
    if (!svg_dir_.empty()) {
      std::vector<std::string> names;
      std::vector<std::filesystem::path> svg_paths;
      for (const report::Figure& figure : figures) {
        names.push_back(figure.name + ".svg");
        svg_paths.push_back(std::filesystem::path(svg_dir_) / names.back());
      }
      svg_dir.emplace(svg_dir_, names);
      check_outputs(svg_paths, inputs());
    }
    if (!html_path_.empty()) write(html_path_, html);
    for (const report::Figure& figure : figures) {
      write(svg_dir->path() / (figure.name + ".svg"), figure.svg);
    }
    if (!png_path_.empty()) {
      write(png_path_, std::string_view(reinterpret_cast<const char*>(png.data()), png.size()));
    }
    if (svg_dir) svg_dir->keep();
  }

  static void write(const std::filesystem::path& path, std::string_view bytes) {
    io::write_file_atomically(path, bytes);
    fmt::print(stderr, "wrote {}\n", path.string());
  }

  /// What is wrong with the command line, as a usage error; "" when nothing. --gpus has no
  /// default (report::Options' 8 silently gave 0.605 for the demo's 32 GPUs, whose figure is
  /// 0.473), so every output that counts per GPU needs it.
  std::string misused_options() const {
    if (!simulation_path_.empty()) return misused_with_simulation();
    if (path_.empty()) return "a recording FILE (or --simulation FILE) is required";
    if (html_path_.empty() && svg_dir_.empty() && png_path_.empty() && !prometheus_) {
      return "nothing to write: give --html OUT, --svg DIR, --png OUT or --prometheus";
    }
    if (!num_gpus_ &&
        (!html_path_.empty() || !svg_dir_.empty() || prometheus_ || !placement_options_.empty())) {
      return "--gpus R is required with --html, --svg, --prometheus or --placement (a "
             "recording or a placement file does not say how many GPUs hold the experts)";
    }
    return "";
  }

  /// A simulation is its own page: it has no recording to put beside it, and none of the
  /// recording's options applies to it.
  std::string misused_with_simulation() const {
    if (!path_.empty()) {
      return "give a recording FILE or --simulation FILE, not both: each makes its own page";
    }
    for (const char* option : {"--placement", "--gpus", "--nodes", "--held-out-from", "--top",
                               "--png", "--prometheus"}) {
      if (sub_->count(option) > 0) {
        return fmt::format("{} is an option of a recording's report, not of --simulation's",
                           option);
      }
    }
    if (html_path_.empty() && svg_dir_.empty()) {
      return "nothing to write: give --html OUT and/or --svg DIR";
    }
    return "";
  }

  /// Every file the command reads: the recording or simulation, and each --placement file.
  std::vector<std::string> inputs() const {
    std::vector<std::string> files{path_, simulation_path_};
    for (const std::string& value : placement_options_) {
      files.push_back(split_placement_option(value).second);
    }
    return files;
  }

  std::string option_context() const {
    std::string out = fmt::format("--gpus {}", options_.num_gpus);
    if (options_.num_nodes != 1) out += fmt::format(", --nodes {}", options_.num_nodes);
    if (held_out_from_) out += fmt::format(", --held-out-from {}", *held_out_from_);
    for (const std::string& value : placement_options_) {
      out += fmt::format(", --placement {}", value);
    }
    return out;
  }

  CLI::App* sub_ = nullptr;
  std::string path_, simulation_path_, html_path_, svg_dir_, png_path_;
  std::vector<std::string> placement_options_;
  bool prometheus_ = false;
  std::optional<std::int64_t> num_gpus_, held_out_from_;
  report::Options options_;
};

}  // namespace

std::unique_ptr<Command> make_report_command() { return std::make_unique<ReportCommand>(); }

}  // namespace moestat::cli
