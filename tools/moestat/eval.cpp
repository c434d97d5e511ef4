// `moestat eval`: how well a placement balances recorded loads.
#include <fmt/format.h>

#include <moestat/error.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/plan/loads.hpp>
#include <moestat/plan/metrics.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "command.hpp"
#include "deployment_options.hpp"
#include "plan_files.hpp"

namespace moestat::cli {
namespace {

class EvalCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* sub =
        app.add_subcommand("eval", "Measure how well a placement balances recorded loads");
    sub->add_option("--stats", stats_, std::string(kStatsFileHelp) + " (a window is summed)")
        ->required();
    sub->add_option("--placement", placement_,
                    "Placement file (.json, .pt or .safetensors): physical_to_logical_map [L][P]")
        ->required();
    add_deployment_options(*sub, config_,
                           {.taken = {DeploymentOption::kGpus},
                            .help = {.gpus = "GPUs: slot p lives on GPU p / (P / gpus)"}});
    sub->add_flag("--json", json_, "Print one JSON object instead of text");
    sub->footer(
        "Layers without load (dense layers) are left out of every mean. balancedness is\n"
        "SGLang's mean over layers of mean/max GPU load; balancedness_sum_ratio is vLLM's sum\n"
        "of means over sum of maxes; imbalance is TensorRT-LLM's (max - mean) / mean.\n\n"
        "Example:\n"
        "  moestat eval --stats today.json --placement placement.json --gpus 32 --json");
    return sub;
  }

  int run() override {
    const plan::ExpertLoads loads = plan::loads_of(io::read_counts(stats_, io::Fractions::kKeep));
    const Placement placement = read_placement_file(placement_, loads.num_experts);
    MOESTAT_CHECK(placement.num_layers() == loads.num_layers, "{} has {} layers, {} has {}",
                  placement_, placement.num_layers(), stats_, loads.num_layers);
    const plan::BalanceReport r = plan::evaluate_placement(loads, placement, config_.num_gpus);
    const double gini = plan::mean_expert_gini(loads);
    if (json_) {
      const nlohmann::ordered_json out{{"balancedness", r.balancedness},
                                       {"balancedness_sum_ratio", r.balancedness_sum_ratio},
                                       {"imbalance", r.imbalance},
                                       {"expert_gini", gini},
                                       {"num_loaded_layers", r.num_loaded_layers},
                                       {"worst_layer", r.worst_layer},
                                       {"worst_balancedness", r.worst_balancedness},
                                       {"layer_balancedness", r.layer_balancedness}};
      fmt::print("{}\n", out.dump());
      return kExitOk;
    }
    fmt::print("loads:        {} ({} layers, {} with load, {} experts)\n", stats_, loads.num_layers,
               r.num_loaded_layers, loads.num_experts);
    fmt::print("placement:    {} ({} slots on {} GPUs)\n", placement_,
               placement.num_physical_experts(), config_.num_gpus);
    fmt::print("balancedness: {:.4f} (mean over layers of mean/max GPU load)\n", r.balancedness);
    fmt::print("sum ratio:    {:.4f} (sum of means / sum of maxes)\n", r.balancedness_sum_ratio);
    fmt::print("imbalance:    {:.4f} (mean over layers of (max - mean) / mean)\n", r.imbalance);
    fmt::print("worst layer:  {} at {:.4f}\n", r.worst_layer, r.worst_balancedness);
    fmt::print("expert Gini:  {:.4f} (mean over layers)\n", gini);
    return kExitOk;
  }

 private:
  std::string stats_, placement_;
  plan::EplbConfig config_;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Command> make_eval_command() { return std::make_unique<EvalCommand>(); }

}  // namespace moestat::cli
