// `moestat llama-offload`: what stays on the GPU when llama.cpp runs a MoE model as a CPU/GPU
// hybrid, for a budget of GPU bytes: the -ot / --n-cpu-moe arguments llama.cpp takes today
// (whole expert tensors) and a per-expert profile for per-expert caches. A command of its own,
// not options of hot-experts: its budget is bytes, not experts, its experts have sizes (from
// the model's tensors), and it writes command-line arguments and a profile, not a KTransformers
// mask.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <moestat/error.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/gguf.hpp>
#include <moestat/io/snapshot_json.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/io/trace_file.hpp>
#include <moestat/plan/llama_offload.hpp>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "command.hpp"
#include "output_files.hpp"
#include "plan_files.hpp"

namespace moestat::cli {
namespace {

using Json = nlohmann::ordered_json;

/// Adds per-token ids [tokens, L, top_k] to [L, E] counts: each id of each layer counted
/// once; -1 (a dense layer, padding, an id out of range) skipped.
void tally_tokens(std::span<const std::int32_t> ids, std::int64_t top_k, CountWindow& counts,
                  std::string_view what) {
  const std::int64_t num_experts = counts.num_experts;
  MOESTAT_CHECK(top_k > 0 && std::int64_t(ids.size()) % (counts.num_layers * top_k) == 0,
                "{}: {} ids are not whole tokens of {} layers x top-{}", what, ids.size(),
                counts.num_layers, top_k);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int32_t id = ids[i];
    if (id < 0) continue;
    MOESTAT_CHECK(id < num_experts, "{}: expert id {} out of [0, {})", what, id, num_experts);
    const std::int64_t layer = (std::int64_t(i) / top_k) % counts.num_layers;
    ++counts.counts[std::size_t(layer * num_experts + id)];
  }
}

/// The counts of `path`: any counts file read_counts reads, or a per-token recording with
/// its tokens' ids tallied per layer and expert: a moestat trace file (the CUDA recorder's,
/// physical ids: one slot per expert, P = E, as llama.cpp has) or a per_token snapshot JSON,
/// which keeps its tokens and no pass window (moestat.llama_cpp --mode per_token writes one).
CountWindow counts_of(const std::string& path) {
  const io::DetectedFile detected = io::read_detected_file(path);
  if (detected.format == io::FileFormat::kTrace) {
    const io::TraceFile trace = io::read_trace(detected.data(), path);
    const io::TraceHeader& h = trace.header;
    MOESTAT_CHECK(h.num_physical_experts == h.num_logical_experts,
                  "{}: a trace of {} physical slots for {} experts holds slot ids, which name no "
                  "expert without the placement: llama-offload takes traces of one slot per expert",
                  path, h.num_physical_experts, h.num_logical_experts);
    MOESTAT_CHECK(!trace.chunks.empty(), "{}: the trace holds no pass", path);
    CountWindow counts{.num_layers = h.num_layers, .num_experts = h.num_logical_experts};
    counts.counts.assign(std::size_t(h.num_layers * h.num_logical_experts), 0);
    for (const io::TraceChunk& chunk : trace.chunks) {
      tally_tokens(chunk.ids, h.top_k, counts, path);
    }
    return counts;
  }
  try {
    return io::read_counts(detected, io::Fractions::kKeep);
  } catch (const Error&) {
    if (detected.format != io::FileFormat::kJson) throw;
    std::optional<Snapshot> snapshot;
    try {
      snapshot = io::snapshot_from_json(detected.bytes);
    } catch (const Error&) {
    }
    if (!snapshot || snapshot->mode != RecordMode::kPerToken || snapshot->num_tokens() == 0) {
      throw;  // read_counts' own error
    }
    CountWindow counts{.num_layers = snapshot->num_layers,
                       .num_experts = snapshot->num_logical_experts};
    counts.counts.assign(std::size_t(counts.num_layers * counts.num_experts), 0);
    tally_tokens(snapshot->token_logical_ids, snapshot->top_k, counts, path);
    return counts;
  }
}

/// [L] bytes of one expert per layer, from a model's blk.N.ffn_*_exps.weight tensors (their
/// bytes summed, over E). moestat::Error when a MoE layer has none or a type is unknown.
std::vector<std::uint64_t> expert_bytes_of_model(const std::filesystem::path& model,
                                                 const plan::ExpertLoads& loads) {
  const io::GgufHeader header = io::read_gguf_header_file(model);
  std::vector<std::uint64_t> bytes(std::size_t(loads.num_layers), 0);
  for (const io::GgufTensorInfo& tensor : header.tensors) {
    const std::string& name = tensor.name;
    if (!name.starts_with("blk.") || !name.ends_with("_exps.weight")) continue;
    // The N of blk.N; a name whose N is not a layer of the counts is not an expert tensor of it.
    std::int64_t layer = -1;
    const std::size_t dot = name.find('.', 4);
    const auto [end, error] = std::from_chars(name.data() + 4, name.data() + dot, layer);
    if (error != std::errc{} || end != name.data() + dot || layer < 0 ||
        layer >= loads.num_layers) {
      continue;
    }
    const std::optional<std::uint64_t> size = io::ggml_tensor_bytes(tensor);
    MOESTAT_CHECK(size.has_value(),
                  "{}: tensor \"{}\" has ggml type {}, whose size moestat does not know (give "
                  "--expert-bytes)",
                  model.string(), name, tensor.type);
    MOESTAT_CHECK(tensor.shape.size() == 3 && tensor.shape[2] == loads.num_experts,
                  "{}: tensor \"{}\" holds {} experts, the counts {}", model.string(), name,
                  tensor.shape.size() == 3 ? tensor.shape[2] : 0, loads.num_experts);
    bytes[std::size_t(layer)] += *size / std::uint64_t(loads.num_experts);
  }
  return bytes;
}

class LlamaOffloadCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand(
        "llama-offload",
        "Which expert tensors llama.cpp keeps on the GPU for a VRAM budget (-ot, --n-cpu-moe) "
        "and a per-expert profile");
    sub->add_option("--stats", stats_,
                    std::string(kStatsFileHelp) +
                        " (a window is summed); or a per-token recording, its tokens' experts "
                        "counted: a moestat trace (.trace) or a per_token snapshot JSON")
        ->required();
    sub->add_option("--vram-bytes", budget_, "GPU bytes for expert tensors")->required();
    CLI::Option_group* size = sub->add_option_group("size", "What one expert takes");
    size->add_option("--model", model_,
                     "The GGUF model: each layer's expert size from its ffn_*_exps tensors "
                     "(only the header is read)");
    size->add_option("--expert-bytes", expert_bytes_,
                     "Bytes of one expert (its gate, up and down rows), every MoE layer")
        ->check(kPositive);
    size->require_option(1);
    sub->add_option("--profile", profile_,
                    "Per-expert profile: .json or .csv, every expert of every MoE layer ranked by "
                    "routed tokens, with shares (docs/llama-cpp.md)");
    sub->add_flag("--json", json_, "Print one JSON object instead of text");
    sub->footer(
        "Whole tensors: llama.cpp places all experts of a layer's blk.N.ffn_{gate,up,down}_exps\n"
        "together, so a GPU budget buys whole layers; the per-expert line says what a cache of\n"
        "single experts would serve with the same bytes.\n\n"
        "Example:\n"
        "  llama-imatrix -m model.gguf -f calibration.txt -o imatrix.gguf\n"
        "  moestat llama-offload --stats imatrix.gguf --model model.gguf \\\n"
        "      --vram-bytes 8000000000 --profile profile.csv\n"
        "  llama-server -m model.gguf -ngl 99 -ot 'blk\\.(0|1|2)\\.ffn_.*_exps\\.=CPU'");
    return sub;
  }

  int run() override {
    const std::filesystem::path profile(profile_);
    std::vector<std::string> inputs{stats_};
    if (!model_.empty()) inputs.push_back(model_);
    if (!profile_.empty()) {
      check_outputs({&profile, 1}, inputs);
      MOESTAT_CHECK(profile.extension() == ".json" || profile.extension() == ".csv",
                    "{}: a profile is .json or .csv", profile_);
    }
    const plan::ExpertLoads loads = plan::loads_of(counts_of(stats_));
    const std::vector<std::uint64_t> sizes =
        model_.empty() ? std::vector<std::uint64_t>(std::size_t(loads.num_layers), *expert_bytes_)
                       : expert_bytes_of_model(model_, loads);
    const plan::LlamaOffload plan = plan::plan_llama_offload(loads, sizes, budget_);
    const std::string override_text =
        plan::llama_cpu_override(plan.whole_layers.gpu_layers, plan.moe_layers);
    if (!profile_.empty()) write_profile(profile, loads, sizes, plan);
    if (json_) {
      print_json(plan, override_text);
    } else {
      print_text(plan, override_text, loads.num_experts);
    }
    return kExitOk;
  }

 private:
  static Json choice_json(const plan::LayerChoice& choice) {
    return {{"gpu_layers", choice.gpu_layers}, {"bytes", choice.bytes}, {"share", choice.share}};
  }

  void print_json(const plan::LlamaOffload& plan, const std::string& override_text) const {
    const Json out{
        {"vram_bytes", budget_},
        {"moe_layers", plan.moe_layers},
        {"override_tensor", override_text},
        {"whole_tensors", choice_json(plan.whole_layers)},
        {"n_cpu_moe", plan.n_cpu_moe},
        {"n_cpu_moe_tensors", choice_json(plan.last_layers)},
        {"per_expert", {{"bytes", plan.expert_bytes_used}, {"share", plan.expert_share}}},
        {"profile", profile_}};
    fmt::print("{}\n", out.dump());
  }

  void print_text(const plan::LlamaOffload& plan, const std::string& override_text,
                  std::int64_t experts) const {
    const std::size_t moe = plan.moe_layers.size();
    fmt::print(
        "budget:        {} bytes of GPU memory for expert tensors, {} MoE layers of {} "
        "experts\n",
        budget_, moe, experts);
    fmt::print(
        "whole tensors: {} of {} MoE layers' expert tensors on the GPU ({} bytes) serve "
        "{:.4f} of routed tokens\n",
        plan.whole_layers.gpu_layers.size(), moe, plan.whole_layers.bytes, plan.whole_layers.share);
    if (override_text.empty()) {
      fmt::print("  llama.cpp:   -ngl 99 (every expert tensor fits)\n");
    } else {
      fmt::print("  llama.cpp:   -ngl 99 -ot '{}'\n", override_text);
    }
    fmt::print(
        "--n-cpu-moe:   {} (expert tensors of layers {} and up on the GPU, {} bytes) serve "
        "{:.4f}\n",
        plan.n_cpu_moe, plan.n_cpu_moe, plan.last_layers.bytes, plan.last_layers.share);
    fmt::print(
        "per expert:    {} bytes of single experts serve {:.4f} (a per-expert cache; not "
        "possible in llama.cpp today)\n",
        plan.expert_bytes_used, plan.expert_share);
    if (!profile_.empty()) fmt::print("wrote:         {}\n", profile_);
  }

  /// Every expert of every MoE layer, most routed tokens first (ties: lower layer, expert),
  /// with its share, the running share and whether the per-expert plan keeps it on the GPU.
  void write_profile(const std::filesystem::path& path, const plan::ExpertLoads& loads,
                     const std::vector<std::uint64_t>& sizes,
                     const plan::LlamaOffload& plan) const {
    struct Row {
      std::int64_t layer, expert;
      double tokens;
    };
    std::vector<Row> rows;
    for (const std::int64_t layer : plan.moe_layers) {
      for (std::int64_t e = 0; e < loads.num_experts; ++e) {
        rows.push_back({layer, e, loads.at(layer, e)});
      }
    }
    std::stable_sort(rows.begin(), rows.end(),
                     [](const Row& a, const Row& b) { return a.tokens > b.tokens; });
    const double total = std::accumulate(loads.values.begin(), loads.values.end(), 0.0);
    const bool csv = path.extension() == ".csv";
    std::string text = csv ? "rank,layer,expert,tokens,share,cumulative_share,bytes,on_gpu\n" : "";
    Json experts = Json::array();
    double running_tokens = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& row = rows[i];
      const double share = total > 0 ? row.tokens / total : 0.0;
      running_tokens += row.tokens;
      const double running = total > 0 ? running_tokens / total : 0.0;
      const bool on_gpu =
          plan.experts.on_gpu[std::size_t(row.layer * loads.num_experts + row.expert)] != 0;
      const std::uint64_t bytes = sizes[std::size_t(row.layer)];
      if (csv) {
        text += fmt::format("{},{},{},{},{},{},{},{}\n", i + 1, row.layer, row.expert, row.tokens,
                            share, running, bytes, on_gpu ? 1 : 0);
      } else {
        experts.push_back({{"rank", i + 1},
                           {"layer", row.layer},
                           {"expert", row.expert},
                           {"tokens", row.tokens},
                           {"share", share},
                           {"cumulative_share", running},
                           {"bytes", bytes},
                           {"on_gpu", on_gpu}});
      }
    }
    if (!csv) {
      text = Json{{"format", "moestat.expert_profile"},
                  {"version", 1},
                  {"num_layers", loads.num_layers},
                  {"num_experts", loads.num_experts},
                  {"total_tokens", total},
                  {"vram_bytes", budget_},
                  {"experts", std::move(experts)}}
                 .dump(1) +
             "\n";
    }
    io::write_file_atomically(path, text);
  }

  std::string stats_, model_, profile_;
  std::uint64_t budget_ = 0;
  std::optional<std::uint64_t> expert_bytes_;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Command> make_llama_offload_command() {
  return std::make_unique<LlamaOffloadCommand>();
}

}  // namespace moestat::cli
