// `moestat inspect FILE [--json]`: says what a file is (JSON, .pt, safetensors, trace, GGUF)
// and summarises it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <moestat/checked_math.hpp>
#include <moestat/io/document.hpp>
#include <moestat/io/formats.hpp>
#include <moestat/io/gguf.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/io/trace_file.hpp>
#include <moestat/printable.hpp>
#include <moestat/routes/routes_file.hpp>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "command.hpp"
#include "describe_value.hpp"
#include "inspect_routes.hpp"

namespace moestat::cli {
namespace {

using Json = nlohmann::ordered_json;

/// Load statistics of one layer: counts (or decayed loads) summed over the file's window.
struct LayerLoad {
  std::int64_t layer = 0;
  double total = 0.0;
  double max = 0.0;
  double mean = 0.0;
  std::vector<std::pair<std::int64_t, double>> hottest;  ///< (expert, load), heaviest first.

  double max_over_mean() const { return mean > 0.0 ? max / mean : 0.0; }
};

/// `loads`: [num_layers, num_experts] row-major.
std::vector<LayerLoad> layer_loads(std::span<const double> loads, std::int64_t num_layers,
                                   std::int64_t num_experts, std::int64_t num_hottest) {
  std::vector<LayerLoad> out;
  std::vector<std::int64_t> order(static_cast<std::size_t>(num_experts));
  for (std::int64_t layer = 0; layer < num_layers; ++layer) {
    const double* row = loads.data() + layer * num_experts;
    LayerLoad load;
    load.layer = layer;
    load.total = std::accumulate(row, row + num_experts, 0.0);
    load.max = *std::max_element(row, row + num_experts);
    load.mean = load.total / double(num_experts);
    std::iota(order.begin(), order.end(), 0);
    const auto shown = std::min<std::int64_t>(num_hottest, num_experts);
    // Heaviest first; ties by lower expert id so the output is deterministic.
    std::partial_sort(order.begin(), order.begin() + shown, order.end(),
                      [row](std::int64_t a, std::int64_t b) {
                        return row[a] != row[b] ? row[a] > row[b] : a < b;
                      });
    if (load.total > 0.0) {
      for (std::int64_t i = 0; i < shown; ++i) {
        load.hottest.emplace_back(order[std::size_t(i)], row[order[std::size_t(i)]]);
      }
    }
    out.push_back(std::move(load));
  }
  return out;
}

std::vector<double> to_double(const std::vector<std::int64_t>& values) {
  return {values.begin(), values.end()};
}

/// Totals from CountWindow::totals and Snapshot::logical_totals always sum (their grand
/// total is checked); token counts per pass are checked here.
std::int64_t sum(const std::vector<std::int64_t>& values, std::string_view what) {
  return checked_sum(values, what);
}

/// A load as text: integers without decimals, decayed loads with two.
std::string load_text(double value, bool integral) {
  return integral ? fmt::format("{:.0f}", value) : fmt::format("{:.2f}", value);
}

Json layers_json(const std::vector<LayerLoad>& layers, bool integral) {
  Json out = Json::array();
  for (const LayerLoad& load : layers) {
    Json hottest = Json::array();
    for (const auto& [expert, value] : load.hottest) {
      hottest.push_back(
          {{"expert", expert}, {"load", integral ? Json(std::int64_t(value)) : Json(value)}});
    }
    out.push_back({{"layer", load.layer},
                   {"total", integral ? Json(std::int64_t(load.total)) : Json(load.total)},
                   {"max", integral ? Json(std::int64_t(load.max)) : Json(load.max)},
                   {"mean", load.mean},
                   {"max_over_mean", load.max_over_mean()},
                   {"hottest", std::move(hottest)}});
  }
  return out;
}

/// The human table: a few loaded layers (all with `all_layers`) and the spread of max/mean.
void print_layer_table(const std::vector<LayerLoad>& layers, bool integral, bool all_layers) {
  std::vector<const LayerLoad*> loaded;
  for (const LayerLoad& load : layers) {
    if (load.total > 0.0) loaded.push_back(&load);
  }
  if (loaded.empty()) {
    fmt::print("load:        every layer is empty\n");
    return;
  }
  constexpr std::size_t kShownEachEnd = 3;
  const bool cut = !all_layers && loaded.size() > 2 * kShownEachEnd + 1;
  fmt::print("load per layer (expert:load of the hottest experts):\n");
  fmt::print("  {:>5}  {:>12}  {:>10}  {:>12}  {:>8}  {}\n", "layer", "total", "max", "mean",
             "max/mean", "hottest");
  for (std::size_t i = 0; i < loaded.size(); ++i) {
    if (cut && i == kShownEachEnd) {
      fmt::print("  {:>5}  ({} more layers; --all-layers shows every one)\n", "...",
                 loaded.size() - 2 * kShownEachEnd);
      i = loaded.size() - kShownEachEnd;
    }
    const LayerLoad& load = *loaded[i];
    std::string hottest;
    for (const auto& [expert, value] : load.hottest) {
      hottest +=
          fmt::format("{}{}:{}", hottest.empty() ? "" : " ", expert, load_text(value, integral));
    }
    fmt::print("  {:>5}  {:>12}  {:>10}  {:>12.2f}  {:>8.2f}  {}\n", load.layer,
               load_text(load.total, integral), load_text(load.max, integral), load.mean,
               load.max_over_mean(), hottest);
  }
  std::vector<double> ratios;
  for (const LayerLoad* load : loaded) ratios.push_back(load->max_over_mean());
  std::sort(ratios.begin(), ratios.end());
  fmt::print("max/mean over {} loaded layers: min {:.2f}, median {:.2f}, max {:.2f}\n",
             ratios.size(), ratios.front(), ratios[ratios.size() / 2], ratios.back());
}

class InspectCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand(
        "inspect",
        "Say what a file is (moestat snapshot, SGLang logical_count or dump, placement, GPU "
        "expert mask, per-token trace, per-request routes, llama-imatrix counts; JSON, .pt, "
        "safetensors or GGUF) and summarise it");
    sub->add_option("FILE", path_, "The file to inspect (format detected from its contents)")
        ->required();
    sub->add_flag("--json", json_, "Print one JSON object instead of text");
    sub->add_option("--top", num_hottest_, "Hottest experts to list per layer")
        ->check(CLI::Range(1, 1000000))
        ->capture_default_str();
    sub->add_flag("--all-layers", all_layers_, "List every loaded layer, not just a few");
    sub->footer(
        "Example:\n"
        "  moestat demo --out demo-out\n"
        "  moestat inspect demo-out/snapshot.json\n"
        "  moestat inspect --json demo-out/logical_count.json\n"
        "  moestat convert demo-out/placement.json placement.pt\n"
        "  moestat inspect placement.pt");
    return sub;
  }

  int run() override {
    // A summary's own errors (a sum that overflows) name the file, as the readers' do
    // ("cannot read FILE: ..." and "FILE: ..." name it already).
    try {
      return summarise();
    } catch (const Error& error) {
      if (error.message().find(printable(path_)) != std::string::npos) throw;
      throw error.with_context(path_);
    }
  }

 private:
  /// Reads the file once, through the format registry, and hands its bytes to the reader of
  /// its format and to the statistics readers.
  int summarise() {
    const io::DetectedFile detected = io::read_detected_file(path_);
    format_ = detected.format;
    Json out = Json::object();
    out["file"] = path_;
    out["format"] = io::file_format_name(detected.format);
    switch (detected.format) {
      case io::FileFormat::kJson:
        inspect_json(detected, out);
        break;
      case io::FileFormat::kTrace:
        inspect(io::read_trace(detected.data(), path_), out);
        break;
      case io::FileFormat::kPt: {
        const io::PtValue value = io::read_pt(detected.data(), path_);
        inspect_statistics(detected, out);
        inspect_contents(detected.format, describe_tree(value, kMaxContentLines), out);
        break;
      }
      case io::FileFormat::kSafetensors: {
        std::vector<std::pair<std::string, std::string>> lines;
        const io::NamedTensors file = io::read_safetensors(detected.data(), path_);
        if (routes::is_routes_file(file)) {
          inspect_routes(routes::routes_from_tensors(file), path_, json_, out);
          break;
        }
        // Names and metadata are the file's bytes: escaped, as .pt keys are.
        for (const auto& [key, value] : file.metadata) {
          lines.emplace_back("__metadata__[\"" + printable(key) + "\"]",
                             "str \"" + printable(value) + "\"");
        }
        // The first lines only, as for .pt files: a header may name 100,000 tensors.
        for (const auto& [name, tensor] : file.tensors) {
          if (lines.size() == kMaxContentLines) break;
          lines.emplace_back(printable(name), describe(tensor));
        }
        inspect_statistics(detected, out);
        inspect_contents(detected.format, lines, out);
        break;
      }
      case io::FileFormat::kGguf:
        inspect_statistics(detected, out);
        inspect_contents(detected.format, gguf_lines(io::read_gguf_header(detected.data(), path_)),
                         out);
        break;
    }
    if (json_) fmt::print("{}\n", out.dump(2, ' ', false, Json::error_handler_t::replace));
    return kExitOk;
  }

  void inspect(const Snapshot& s, Json& out) const {
    const bool decayed = s.mode == RecordMode::kDecayed;
    const bool per_token = s.mode == RecordMode::kPerToken;
    // Only what the file holds: an empty window has no [L][E] totals worth allocating.
    const bool holds_counts = s.window_size() > 0 || s.num_tokens() > 0;
    const std::vector<std::int64_t> totals =
        holds_counts ? s.logical_totals() : std::vector<std::int64_t>{};
    const std::vector<double> loads = decayed ? s.decayed_logical_load : to_double(totals);
    const std::vector<LayerLoad> layers =
        loads.empty() ? std::vector<LayerLoad>{}
                      : layer_loads(loads, s.num_layers, s.num_logical_experts, num_hottest_);
    const std::int64_t valid_tokens = sum(s.pass_num_tokens, "the sum of pass_num_tokens");
    const std::set<std::uint64_t> versions(s.placement_versions.begin(),
                                           s.placement_versions.end());
    const std::int64_t assignments = sum(totals, "the sum of the logical counts");
    const double decayed_total =
        std::accumulate(s.decayed_logical_load.begin(), s.decayed_logical_load.end(), 0.0);

    out["mode"] = record_mode_name(s.mode);
    out["approximate"] = s.approximate;
    out["num_layers"] = s.num_layers;
    out["num_logical_experts"] = s.num_logical_experts;
    out["num_physical_experts"] = s.num_physical_experts;
    out["top_k"] = s.top_k;
    out["num_passes"] = s.num_passes;
    out["window_size"] = s.window_size();
    out["num_tokens_kept"] = s.num_tokens();
    out["valid_tokens_in_window"] = valid_tokens;
    out["total_assignments"] = assignments;
    if (decayed) out["total_decayed_load"] = decayed_total;
    out["dropped_ids"] = s.dropped_ids;
    out["dropped_tokens"] = s.dropped_tokens;
    out["placement_versions"] = versions;
    out["layers"] = layers_json(layers, !decayed);
    if (json_) return;

    fmt::print("file:        {}\n", printable(path_));
    fmt::print("kind:        moestat snapshot, mode {}{}\n", record_mode_name(s.mode),
               s.approximate ? " (approximate: DeepEP normal-dispatch counts)" : "");
    if (per_token) {
      fmt::print(
          "shape:       {} tokens x {} layers x top-{} ids; {} logical experts ({} physical)\n",
          s.num_tokens(), s.num_layers, s.top_k, s.num_logical_experts, s.num_physical_experts);
    } else if (decayed) {
      fmt::print("shape:       {} layers x {} logical experts ({} physical), top-{}\n",
                 s.num_layers, s.num_logical_experts, s.num_physical_experts, s.top_k);
    } else {
      fmt::print("shape:       {} passes x {} layers x {} logical experts ({} physical), top-{}\n",
                 s.window_size(), s.num_layers, s.num_logical_experts, s.num_physical_experts,
                 s.top_k);
    }
    if (s.window_size() > 0) {
      const auto [first, last] = std::minmax_element(s.pass_ids.begin(), s.pass_ids.end());
      fmt::print("passes:      {} recorded, {} in the window (pass ids {}..{})\n", s.num_passes,
                 s.window_size(), *first, *last);
      fmt::print("tokens:      {} valid tokens in the window\n", valid_tokens);
      fmt::print("placement:   version{} {}\n", versions.size() == 1 ? "" : "s",
                 fmt::join(versions, ", "));
    } else {
      fmt::print("passes:      {} recorded\n", s.num_passes);
    }
    if (decayed) {
      fmt::print("load:        {:.2f} decayed logical load in total\n", decayed_total);
    } else {
      fmt::print("assignments: {} (sum of logical counts)\n", assignments);
    }
    fmt::print("dropped:     {} ids out of range{}\n", s.dropped_ids,
               per_token ? fmt::format(", {} tokens that did not fit", s.dropped_tokens) : "");
    if (!layers.empty()) print_layer_table(layers, !decayed, all_layers_);
  }

  void inspect(const CountWindow& counts, Json& out) const {
    const std::vector<std::int64_t> totals = counts.totals();
    const std::vector<LayerLoad> layers =
        layer_loads(to_double(totals), counts.num_layers, counts.num_experts, num_hottest_);
    out["has_window_axis"] = counts.has_window_axis;
    out["window_size"] = counts.window_size;
    out["num_layers"] = counts.num_layers;
    out["num_experts"] = counts.num_experts;
    out["total_assignments"] = sum(totals, "the sum of logical_count");
    out["layers"] = layers_json(layers, true);
    if (json_) return;

    fmt::print("file:        {}\n", printable(path_));
    // A GGUF holds llama-imatrix's per-expert `.counts`, not SGLang's logical_count.
    fmt::print("kind:        {}, {}\n",
               format_ == io::FileFormat::kGguf ? "llama-imatrix counts (per-expert .counts)"
                                                : "SGLang logical_count",
               counts.has_window_axis ? "[passes][layers][experts]" : "[layers][experts]");
    if (counts.has_window_axis) {
      fmt::print("shape:       {} passes x {} layers x {} experts\n", counts.window_size,
                 counts.num_layers, counts.num_experts);
    } else {
      fmt::print("shape:       {} layers x {} experts\n", counts.num_layers, counts.num_experts);
    }
    fmt::print("assignments: {} (sum of counts)\n", out["total_assignments"].get<std::int64_t>());
    print_layer_table(layers, true, all_layers_);
  }

  void inspect(const Placement& placement, Json& out) const {
    const std::int64_t num_layers = placement.num_layers();
    const std::int64_t num_logical = placement.num_logical_experts();
    const std::int64_t num_physical = placement.num_physical_experts();
    const Placement trivial = Placement::trivial(num_layers, num_physical, num_logical);
    std::int64_t trivial_layers = 0;
    Json layers = Json::array();
    std::vector<std::string> lines;
    for (std::int64_t layer = 0; layer < num_layers; ++layer) {
      const auto row = placement.physical_to_logical().subspan(std::size_t(layer * num_physical),
                                                               std::size_t(num_physical));
      const auto trivial_row = trivial.physical_to_logical().subspan(
          std::size_t(layer * num_physical), std::size_t(num_physical));
      const bool is_trivial = std::equal(row.begin(), row.end(), trivial_row.begin());
      trivial_layers += is_trivial ? 1 : 0;
      // Experts with more than one replica, most replicas first.
      std::vector<std::pair<std::int64_t, std::int32_t>> replicated;
      for (std::int64_t expert = 0; expert < num_logical; ++expert) {
        const std::int32_t replicas =
            placement.replica_counts()[std::size_t(layer * num_logical + expert)];
        if (replicas > 1) replicated.emplace_back(expert, replicas);
      }
      std::stable_sort(replicated.begin(), replicated.end(),
                       [](const auto& a, const auto& b) { return a.second > b.second; });
      Json replicated_json = Json::array();
      std::string text;
      for (const auto& [expert, replicas] : replicated) {
        replicated_json.push_back({{"expert", expert}, {"replicas", replicas}});
        if (std::int64_t(text.size()) < 60) text += fmt::format(" {}x{}", expert, replicas);
      }
      if (replicated.size() > 0 && text.size() >= 60) text += " ...";
      layers.push_back(
          {{"layer", layer}, {"trivial", is_trivial}, {"replicated", std::move(replicated_json)}});
      lines.push_back(
          fmt::format("  {:>5}  {:>10}{}", layer,
                      is_trivial ? "trivial" : fmt::format("{} replicated", replicated.size()),
                      text.empty() ? "" : ":" + text));
    }
    out["num_layers"] = num_layers;
    out["num_physical_experts"] = num_physical;
    out["num_logical_experts"] = num_logical;
    out["max_replicas"] = placement.max_replicas();
    out["trivial_layers"] = trivial_layers;
    out["layers"] = std::move(layers);
    if (json_) return;

    fmt::print("file:        {}\n", printable(path_));
    fmt::print("kind:        placement (physical_to_logical_map)\n");
    fmt::print("shape:       {} layers x {} physical slots holding {} logical experts\n",
               num_layers, num_physical, num_logical);
    fmt::print("replicas:    {} redundant slots per layer, at most {} replicas of an expert\n",
               num_physical - num_logical, placement.max_replicas());
    fmt::print("layers:      {} of {} trivial (slot p holds expert p % {})\n", trivial_layers,
               num_layers, num_logical);
    fmt::print("replicated experts per layer (expert x replicas):\n");
    constexpr std::size_t kShownEachEnd = 3;
    const bool cut = !all_layers_ && lines.size() > 2 * kShownEachEnd + 1;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (cut && i == kShownEachEnd) {
        fmt::print("  {:>5}  ({} more layers; --all-layers shows every one)\n", "...",
                   lines.size() - 2 * kShownEachEnd);
        i = lines.size() - kShownEachEnd;
      }
      fmt::print("{}\n", lines[i]);
    }
  }

  static constexpr std::size_t kMaxContentLines = 200;

  /// A GGUF file's metadata, then its tensors, the first kMaxContentLines of them: a model's
  /// header names a thousand tensors.
  static std::vector<std::pair<std::string, std::string>> gguf_lines(const io::GgufHeader& header) {
    std::vector<std::pair<std::string, std::string>> lines;
    for (const auto& [key, value] : header.metadata) {
      if (lines.size() == kMaxContentLines) return lines;
      lines.emplace_back(printable(key), printable(value.text));
    }
    for (const io::GgufTensorInfo& tensor : header.tensors) {
      if (lines.size() == kMaxContentLines) break;
      lines.emplace_back(printable(tensor.name), fmt::format("ggml type {} [{}]", tensor.type,
                                                             fmt::join(tensor.shape, ", ")));
    }
    return lines;
  }

  /// A snapshot is read as the document it is (it holds more than its counts: mode, tokens,
  /// drops); any other JSON file as every command reads it, through io::read_statistics_file.
  void inspect_json(const io::DetectedFile& detected, Json& out) const {
    std::exception_ptr not_a_document;
    try {
      if (const io::Document document = io::read_document(detected);
          const auto* snapshot = std::get_if<Snapshot>(&document)) {
        out["kind"] = io::document_kind_name(io::DocumentKind::kSnapshot);
        inspect(*snapshot, out);
        return;
      }
    } catch (const Error&) {
      // Perhaps an expert mask, which is no document; otherwise the document error says
      // what the file is not.
      not_a_document = std::current_exception();
    }
    io::StatisticsFile file;
    try {
      file = io::read_statistics_file(detected);
    } catch (const Error& statistics_error) {
      // The statistics reader knows more kinds (expert masks): its error is the telling one,
      // unless it only says the file is none of them, which the document error says better.
      if (not_a_document && statistics_error.message().find("missing key") != std::string::npos) {
        std::rethrow_exception(not_a_document);
      }
      throw;
    }
    inspect(file, out);
  }

  /// What a .pt or safetensors file holds, key by key.
  void inspect_contents(io::FileFormat format,
                        const std::vector<std::pair<std::string, std::string>>& lines,
                        Json& out) const {
    Json contents = Json::object();
    for (const auto& [path, description] : lines) contents[path] = description;
    out["contents"] = std::move(contents);
    if (json_) return;
    fmt::print("format:      {}\n", io::file_format_info(format).description);
    fmt::print("contents:\n");
    for (const auto& [path, description] : lines) fmt::print("  {}: {}\n", path, description);
    if (lines.size() >= kMaxContentLines) fmt::print("  ... (first {} shown)\n", lines.size());
  }

  /// The summary of the statistics a binary file holds, when it holds any.
  void inspect_statistics(const io::DetectedFile& detected, Json& out) const {
    io::StatisticsFile file;
    try {
      file = io::read_statistics_file(detected);
    } catch (const Error& error) {
      out["kind"] = "other";
      out["not_statistics"] = error.message();
      if (!json_) {
        fmt::print("file:        {}\n", printable(path_));
        fmt::print("kind:        no moestat statistics ({})\n", error.message());
      }
      return;
    }
    inspect(file, out);
  }

  void inspect(const io::StatisticsFile& file, Json& out) const {
    out["kind"] = io::statistics_kind_name(io::statistics_kind(file));
    std::visit([&](const auto& payload) { inspect(payload, out); }, file);
  }

  void inspect(const ExpertMask& mask, Json& out) const {
    Json layers = Json::array();
    std::int64_t total = 0;
    std::int64_t least = mask.num_experts;
    std::int64_t most = 0;
    for (std::int64_t layer = 0; layer < mask.num_layers; ++layer) {
      const auto row = mask.on_gpu.begin() + layer * mask.num_experts;
      const std::int64_t on_gpu = std::count(row, row + mask.num_experts, std::uint8_t{1});
      layers.push_back({{"layer", layer}, {"on_gpu", on_gpu}});
      total += on_gpu;
      least = std::min(least, on_gpu);
      most = std::max(most, on_gpu);
    }
    out["num_layers"] = mask.num_layers;
    out["num_experts"] = mask.num_experts;
    out["experts_on_gpu"] = total;
    out["layers"] = std::move(layers);
    if (json_) return;
    fmt::print("file:        {}\n", printable(path_));
    fmt::print("kind:        GPU expert mask (gpu_experts_masks)\n");
    fmt::print("shape:       {} layers x {} experts\n", mask.num_layers, mask.num_experts);
    fmt::print("on GPU:      {} of {} experts ({} to {} per layer)\n", total,
               mask.num_layers * mask.num_experts, least, most);
  }

  void inspect(const io::TraceFile& trace, Json& out) const {
    const io::TraceHeader& h = trace.header;
    std::set<std::uint64_t> versions;
    for (const io::TraceChunk& chunk : trace.chunks) versions.insert(chunk.placement_version);
    out["kind"] = "trace";
    out["num_layers"] = h.num_layers;
    out["num_logical_experts"] = h.num_logical_experts;
    out["num_physical_experts"] = h.num_physical_experts;
    out["top_k"] = h.top_k;
    out["num_chunks"] = trace.chunks.size();
    out["num_tokens"] = trace.num_tokens();
    out["truncated"] = trace.truncated;
    out["placement_versions"] = versions;
    if (json_) return;
    fmt::print("file:        {}\n", printable(path_));
    fmt::print("kind:        per-token trace\n");
    fmt::print("shape:       {} layers x top-{} physical ids; {} logical experts ({} physical)\n",
               h.num_layers, h.top_k, h.num_logical_experts, h.num_physical_experts);
    if (trace.chunks.empty()) {
      fmt::print("passes:      none\n");
    } else {
      fmt::print("passes:      {} (pass ids {}..{})\n", trace.chunks.size(),
                 trace.chunks.front().pass_id, trace.chunks.back().pass_id);
      fmt::print("placement:   version{} {}\n", versions.size() == 1 ? "" : "s",
                 fmt::join(versions, ", "));
    }
    fmt::print("tokens:      {}\n", trace.num_tokens());
    fmt::print("complete:    {}\n", trace.truncated
                                        ? "no: the file ends inside a chunk (being written, or "
                                          "cut short); complete chunks shown"
                                        : "yes");
  }

  std::string path_;
  bool json_ = false;
  bool all_layers_ = false;
  io::FileFormat format_ = io::FileFormat::kJson;  ///< Of the file summarised (summarise()).
  std::int64_t num_hottest_ = 3;
};

}  // namespace

std::unique_ptr<Command> make_inspect_command() { return std::make_unique<InspectCommand>(); }

}  // namespace moestat::cli
