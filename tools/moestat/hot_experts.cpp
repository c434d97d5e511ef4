// `moestat hot-experts`: which experts of each layer live on the GPU in CPU/GPU hybrid
// inference, under a budget, and the share of assignments they serve.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <moestat/error.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/plan/hot_experts.hpp>
#include <moestat/plan/metrics.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "command.hpp"
#include "output_files.hpp"
#include "plan_files.hpp"

namespace moestat::cli {
namespace {

class HotExpertsCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand(
        "hot-experts", "Choose the experts of each layer to keep on the GPU (hybrid inference)");
    sub->add_option("--stats", stats_, std::string(kStatsFileHelp) + " (a window is summed)")
        ->required();
    sub->add_option("--strategy", strategy_,
                    "uniform, front-loading, random, frequency (KTransformers: one global "
                    "top-G) or layer-balanced")
        ->required()
        ->check(
            CLI::IsMember({"uniform", "front-loading", "random", "frequency", "layer-balanced"}));
    CLI::Option_group* budget = sub->add_option_group("budget", "The GPU expert budget G");
    budget->add_option("--per-layer", per_layer_, "GPU experts per MoE layer: G = K x MoE layers")
        ->check(kNonNegative);
    budget->add_option("--ratio", ratio_, "Share of all MoE experts: G = X x MoE layers x E")
        ->check(kFraction);
    budget->require_option(1);
    sub->add_option("--seed", seed_, "Seed of the random strategy")->capture_default_str();
    sub->add_option("--out", out_,
                    "Output mask by extension: .json {\"gpu_experts_masks\": [L][E]}, .pt a bool "
                    "tensor [L, E] (KTransformers), .safetensors")
        ->required();
    sub->add_flag("--json", json_, "Print one JSON object instead of text");
    sub->footer(
        "Dense layers (no load) are all true in the mask, as KTransformers writes them.\n"
        "The hit rate is the share of all assignments served by experts on the GPU.\n\n"
        "Example:\n"
        "  moestat hot-experts --stats today.json --strategy layer-balanced --per-layer 64 \\\n"
        "      --out mask.json");
    return sub;
  }

  int run() override {
    const std::filesystem::path out_path(out_);
    // Makes --out's missing directories, as every output does; removed again on failure.
    OutputFiles output({&out_path, 1}, std::vector<std::string>{stats_});
    const plan::ExpertLoads loads = plan::loads_of(io::read_counts(stats_, io::Fractions::kKeep));
    const std::int64_t budget = per_layer_ ? plan::hot_expert_budget_per_layer(loads, *per_layer_)
                                           : plan::hot_expert_budget_ratio(loads, *ratio_);
    const ExpertMask mask = plan::choose_hot_experts(
        loads, budget, {.strategy = plan::parse_hot_expert_strategy(strategy_), .seed = seed_});
    write_mask_file(out_, mask);
    output.keep();
    const std::vector<std::int64_t> layer_count = mask.gpu_experts_per_layer();
    const double hit = plan::hot_expert_hit_rate(loads, mask.on_gpu);
    const std::vector<double> layers = plan::hot_expert_layer_hit_rates(loads, mask.on_gpu);
    double worst = 1.0;
    std::int64_t worst_layer = -1;
    for (std::int64_t l = 0; l < loads.num_layers; ++l) {
      if (loads.layer_total(l) > 0.0 && layers[std::size_t(l)] < worst) {
        worst = layers[std::size_t(l)];
        worst_layer = l;
      }
    }
    if (json_) {
      const nlohmann::ordered_json out{{"strategy", strategy_},
                                       {"budget", budget},
                                       {"num_moe_layers", plan::num_moe_layers(loads)},
                                       {"hit_rate", hit},
                                       {"worst_layer", worst_layer},
                                       {"worst_layer_hit_rate", worst},
                                       {"layer_count", layer_count},
                                       {"out", out_}};
      fmt::print("{}\n", out.dump());
      return kExitOk;
    }
    std::int64_t fewest = loads.num_experts, most = 0;
    for (std::int64_t l = 0; l < loads.num_layers; ++l) {
      if (loads.layer_total(l) <= 0.0) continue;
      fewest = std::min(fewest, layer_count[std::size_t(l)]);
      most = std::max(most, layer_count[std::size_t(l)]);
    }
    fmt::print("strategy:    {}, budget {} GPU experts over {} MoE layers\n", strategy_, budget,
               plan::num_moe_layers(loads));
    fmt::print("per layer:   {} to {} GPU experts per MoE layer (of {})\n", fewest, most,
               loads.num_experts);
    fmt::print("hit rate:    {:.4f} of all assignments served on the GPU\n", hit);
    fmt::print("worst layer: {} at {:.4f}\n", worst_layer, worst);
    fmt::print("wrote:       {}\n", out_);
    return kExitOk;
  }

 private:
  std::string stats_, strategy_, out_;
  std::optional<std::int64_t> per_layer_;
  std::optional<double> ratio_;
  std::uint64_t seed_ = 0;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Command> make_hot_experts_command() {
  return std::make_unique<HotExpertsCommand>();
}

}  // namespace moestat::cli
