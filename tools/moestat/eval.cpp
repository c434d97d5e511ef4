// `moestat eval`: how well a placement balances recorded loads.
#include <fmt/format.h>

#include <moestat/error.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/plan/loads.hpp>
#include <moestat/plan/metrics.hpp>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

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
    sub->add_option("--max-scenarios", max_scenarios_,
                    "A file with a window: its passes in at most this many groups, each summed, "
                    "as `moestat plan` makes its scenarios (the same default)")
        ->check(CLI::Range(1, 1000000))
        ->capture_default_str();
    sub->add_flag("--json", json_, "Print one JSON object instead of text");
    sub->footer(
        "Layers without load (dense layers) are left out of every mean. balancedness is\n"
        "SGLang's mean over layers of mean/max GPU load, of the window summed;\n"
        "balancedness_sum_ratio is vLLM's sum of means over sum of maxes; imbalance is\n"
        "TensorRT-LLM's (max - mean) / mean. With a window: expected is the mean balancedness\n"
        "over plan's scenarios (what `moestat plan` prints per scenario and moestat plans\n"
        "for), and pass by pass the sum over passes and layers of mean over max GPU load (each\n"
        "pass counting by its load: what a run waits for).\n\n"
        "Example:\n"
        "  moestat eval --stats today.json --placement placement.json --gpus 32 --json");
    return sub;
  }

  int run() override {
    const CountWindow window = io::read_counts(stats_, io::Fractions::kKeep);
    const plan::ExpertLoads loads = plan::loads_of(window);
    const Placement placement =
        read_placement_file(placement_, {loads.num_layers, loads.num_experts, stats_});
    const plan::BalanceReport r = plan::evaluate_placement(loads, placement, config_.num_gpus);
    const double gini = plan::mean_expert_gini(loads);
    // The objective `plan` reports and moestat plans for: the scenarios' mean balancedness.
    std::vector<double> scenarios;
    for (const plan::ExpertLoads& scenario : plan::window_scenarios(window, max_scenarios_)) {
      scenarios.push_back(
          plan::evaluate_placement(scenario, placement, config_.num_gpus).balancedness);
    }
    const double expected =
        std::accumulate(scenarios.begin(), scenarios.end(), 0.0) / double(scenarios.size());
    std::vector<std::int64_t> passes(std::size_t(window.window_size));
    std::iota(passes.begin(), passes.end(), std::int64_t{0});
    const double served = plan::served_balancedness(window, passes, placement, config_.num_gpus);
    if (json_) {
      const nlohmann::ordered_json out{{"balancedness", r.balancedness},
                                       {"balancedness_sum_ratio", r.balancedness_sum_ratio},
                                       {"imbalance", r.imbalance},
                                       {"expert_gini", gini},
                                       {"num_loaded_layers", r.num_loaded_layers},
                                       {"worst_layer", r.worst_layer},
                                       {"worst_balancedness", r.worst_balancedness},
                                       {"layer_balancedness", r.layer_balancedness},
                                       {"expected_balancedness", expected},
                                       {"scenario_balancedness", scenarios},
                                       {"served_balancedness", served}};
      fmt::print("{}\n", out.dump());
      return kExitOk;
    }
    fmt::print("loads:        {} ({} layers, {} with load, {} experts)\n", stats_, loads.num_layers,
               r.num_loaded_layers, loads.num_experts);
    fmt::print("placement:    {} ({} slots on {} GPUs)\n", placement_,
               placement.num_physical_experts(), config_.num_gpus);
    fmt::print(
        "balancedness: {:.4f} (of the window summed: mean over layers of mean/max GPU load)\n",
        r.balancedness);
    fmt::print(
        "expected:     {:.4f} (mean of the balancedness of {} scenario{}: what `moestat "
        "plan` prints per scenario)\n",
        expected, scenarios.size(), scenarios.size() == 1 ? "" : "s");
    fmt::print(
        "pass by pass: {:.4f} (over {} pass{}: sum of mean over sum of max GPU load, "
        "each pass by its load)\n",
        served, window.window_size, window.window_size == 1 ? "" : "es");
    fmt::print("sum ratio:    {:.4f} (sum of means / sum of maxes)\n", r.balancedness_sum_ratio);
    fmt::print("imbalance:    {:.4f} (mean over layers of (max - mean) / mean)\n", r.imbalance);
    fmt::print("worst layer:  {} at {:.4f}\n", r.worst_layer, r.worst_balancedness);
    fmt::print("expert Gini:  {:.4f} (mean over layers)\n", gini);
    return kExitOk;
  }

 private:
  std::string stats_, placement_;
  plan::EplbConfig config_;
  std::int64_t max_scenarios_ = kDefaultMaxScenarios;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Command> make_eval_command() { return std::make_unique<EvalCommand>(); }

}  // namespace moestat::cli
