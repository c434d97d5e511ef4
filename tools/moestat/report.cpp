// `moestat report FILE`: the recording as an HTML page, a heatmap PNG and/or Prometheus text.
#include <fmt/format.h>

#include <moestat/error.hpp>
#include <moestat/io/files.hpp>
#include <moestat/report.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "command.hpp"
#include "output_files.hpp"
#include "plan_files.hpp"

namespace moestat::cli {
namespace {

class ReportCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand(
        "report",
        "Draw a recording: an HTML page with a heatmap, per-GPU loads and balancedness, a "
        "heatmap PNG, or Prometheus metrics");
    sub->add_option("FILE", path_,
                    "A recording: a moestat snapshot or SGLang logical counts (.json, an SGLang "
                    ".pt dump or .safetensors)")
        ->required();
    sub->add_option("--placement", placement_path_,
                    "A placement (physical_to_logical_map [L][P]: .json, .pt or .safetensors) to "
                    "compare with the identity placement");
    sub->add_option("--gpus", num_gpus_,
                    "Expert-parallel GPUs; must divide the experts and the placement's slots. "
                    "Required with --html, --prometheus or --placement")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
    sub->add_option("--top", options_.top_experts, "Hottest experts listed per layer")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1000}))
        ->capture_default_str();
    sub->add_option("--html", html_path_, "Write the HTML report here");
    sub->add_option("--png", png_path_, "Write the layers x experts heatmap here as PNG");
    sub->add_flag("--prometheus", prometheus_,
                  "Print the metrics in Prometheus text exposition format");
    sub->footer(
        "At least one of --html, --png and --prometheus. The page is self-contained (inline\n"
        "SVG, no script, no network). Without --placement it shows the identity placement\n"
        "(expert e on GPU e / (E / GPUs)) only. --gpus has no default: nothing in a recording\n"
        "or a placement file says how many GPUs the slots are spread over, and a wrong count\n"
        "changes every per-GPU figure.\n\n"
        "Example:\n"
        "  moestat demo --out demo-out\n"
        "  moestat report demo-out/snapshot.json --placement demo-out/placement.json --gpus 32 \\\n"
        "      --html demo-out/report.html --png demo-out/heatmap.png\n"
        "  moestat report logical_count.pt --gpus 32 --prometheus > metrics.prom");
    return sub;
  }

  int run() override {
    if (const std::string missing = missing_options(); !missing.empty()) {
      fmt::print(stderr, "moestat report: {}\nRun with --help for more information.\n", missing);
      return kExitUsageError;
    }
    // Every output is checked, and every rendering made, before the first file is written:
    // an error writes nothing.
    const std::vector<std::filesystem::path> outputs{html_path_, png_path_};
    check_outputs(outputs);
    const report::Recording recording = report::load_recording(path_);
    // --png alone draws no GPU and needs no count; 1 divides every recording.
    options_.num_gpus = num_gpus_.value_or(1);
    if (!placement_path_.empty()) {
      // The reader eval and plan --previous use: every placement format.
      options_.placement = read_placement_file(placement_path_, recording.num_experts());
    }
    try {
      options_.validate(recording);
    } catch (const Error& error) {
      // The library speaks of GPUs and placements; the user gave them as these options.
      throw error.with_context(
          placement_path_.empty()
              ? fmt::format("--gpus {}", options_.num_gpus)
              : fmt::format("--gpus {}, --placement {}", options_.num_gpus, placement_path_));
    }
    const std::string html = html_path_.empty() ? "" : report::render_html(recording, options_);
    const std::vector<std::uint8_t> png =
        png_path_.empty() ? std::vector<std::uint8_t>{} : report::render_heatmap_png(recording);
    if (!html_path_.empty()) {
      io::write_file_atomically(html_path_, html);
      fmt::print(stderr, "wrote {}\n", html_path_);
    }
    if (!png_path_.empty()) {
      io::write_file_atomically(
          png_path_, std::string_view(reinterpret_cast<const char*>(png.data()), png.size()));
      fmt::print(stderr, "wrote {}\n", png_path_);
    }
    if (prometheus_) fmt::print("{}", report::prometheus_text(recording, options_));
    return kExitOk;
  }

 private:
  /// What the command line lacks, as a usage error; "" when nothing. --gpus has no default
  /// (report::Options' 8 silently gave 0.605 for the demo's 32 GPUs, whose figure is 0.473),
  /// so every output that counts per GPU needs it.
  std::string missing_options() const {
    if (html_path_.empty() && png_path_.empty() && !prometheus_) {
      return "nothing to write: give --html OUT, --png OUT or --prometheus";
    }
    if (!num_gpus_ && (!html_path_.empty() || prometheus_ || !placement_path_.empty())) {
      return "--gpus R is required with --html, --prometheus or --placement (a recording or a "
             "placement file does not say how many GPUs hold the experts)";
    }
    return "";
  }

  std::string path_, placement_path_, html_path_, png_path_;
  bool prometheus_ = false;
  std::optional<std::int64_t> num_gpus_;
  report::Options options_;
};

}  // namespace

std::unique_ptr<Command> make_report_command() { return std::make_unique<ReportCommand>(); }

}  // namespace moestat::cli
