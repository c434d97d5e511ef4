// `moestat plan`: an expert placement from recorded loads, by DeepSeek's EPLB (exactly) or
// moestat's planner (several recordings or passes as scenarios), optionally moving as few
// expert weights as possible from the placement in force.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <moestat/error.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/plan/cross_node.hpp>
#include <moestat/plan/eplb.hpp>
#include <moestat/plan/metrics.hpp>
#include <moestat/plan/replan.hpp>
#include <optional>
#include <string>
#include <vector>

#include "command.hpp"
#include "deployment_options.hpp"
#include "output_files.hpp"
#include "plan_files.hpp"

namespace moestat::cli {
namespace {

/// Where movement-aware replanning left the MoE layers (those with load), by per-layer
/// balancedness on the scenarios' equal-weight sum, the measure --target is checked on.
struct TargetOutcome {
  std::int64_t moe_layers = 0;
  std::int64_t missed = 0;  ///< MoE layers below the target.
  std::int64_t lowest_layer = -1;
  double lowest = 1.0;
  double mean = 0.0;
};

TargetOutcome target_outcome(const plan::ReplanResult& result, const plan::ExpertLoads& loads,
                             double target) {
  TargetOutcome out;
  double sum = 0.0;
  for (std::int64_t l = 0; l < loads.num_layers; ++l) {
    if (loads.layer_total(l) <= 0.0) continue;
    const double reached = result.balancedness_after[std::size_t(l)];
    ++out.moe_layers;
    sum += reached;
    if (reached < target) ++out.missed;
    if (out.lowest_layer < 0 || reached < out.lowest) {
      out.lowest = reached;
      out.lowest_layer = l;
    }
  }
  out.mean = out.moe_layers > 0 ? sum / double(out.moe_layers) : 1.0;
  return out;
}

class PlanCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand(
        "plan", "Plan an expert placement (physical_to_logical_map) from recorded loads");
    sub->add_option("--stats", stats_,
                    std::string(kStatsFileHelp) + "; repeat for several workloads")
        ->required();
    sub->add_option("--algorithm", algorithm_, "deepseek (eplb.py, exactly) or moestat")
        ->check(CLI::IsMember({"deepseek", "moestat"}))
        ->capture_default_str();
    add_deployment_options(*sub, config_);
    sub->add_option("--previous", previous_,
                    "The placement in force (.json, .pt or .safetensors): reach --target with "
                    "as few expert copies as possible (moestat only; says when it falls short)");
    sub->add_option("--target", target_, "With --previous: per-layer balancedness to reach")
        ->check(kFraction)
        ->capture_default_str();
    sub->add_option("--objective", objective_,
                    "moestat with several scenarios: minimise the expected or the worst-case "
                    "max GPU load")
        ->check(CLI::IsMember({"expected", "worst-case"}))
        ->capture_default_str();
    sub->add_option("--max-scenarios", max_scenarios_,
                    "One file with a window: its passes are merged into at most this many "
                    "scenarios")
        ->check(CLI::Range(1, 1000000))
        ->capture_default_str();
    sub->add_option("--cross-node-replicas", cross_node_,
                    "moestat, hierarchical: let up to K replicas per layer sit off their "
                    "group's node (reports the share of assignments they serve)")
        ->check(kNonNegative)
        ->capture_default_str();
    sub->add_option(
           "--out", out_,
           "Output placement by extension: .json or .pt (SGLang's --init-expert-location), "
           ".safetensors")
        ->required();
    sub->footer(
        "The output is exactly {\"physical_to_logical_map\": [L][P]} for SGLang's\n"
        "--init-expert-location. moestat takes every --stats file (or, for one file with a\n"
        "[W][L][E] window, groups of its passes) as a scenario of future traffic; deepseek\n"
        "plans on their equal-weight sum.\n\n"
        "Example:\n"
        "  moestat plan --stats day1.json --stats day2.json --algorithm moestat \\\n"
        "      --replicas 288 --groups 8 --nodes 4 --gpus 32 --out placement.json\n"
        "  moestat plan --stats today.json --previous placement.json --target 0.95 \\\n"
        "      --replicas 288 --gpus 32 --out next.json");
    return sub;
  }

  int run() override {
    std::vector<std::string> inputs = stats_;
    inputs.push_back(previous_);
    const std::filesystem::path out(out_);
    OutputFiles output({&out, 1}, inputs);
    // moestat's scenarios; and each file's total, which the reference plans on (one file:
    // its window summed, as SGLang sums it; several: their equal-weight sum).
    std::vector<plan::ExpertLoads> scenarios, totals;
    for (const std::string& path : stats_) {
      const CountWindow window = io::read_counts(path, io::Fractions::kKeep);
      totals.push_back(plan::loads_of(window));
      window_passes_ = window.window_size;
      if (stats_.size() == 1) {
        scenarios = plan::window_scenarios(window, max_scenarios_);
      } else {
        scenarios.push_back(totals.back());
      }
      MOESTAT_CHECK(scenarios.front().num_layers == window.num_layers &&
                        scenarios.front().num_experts == window.num_experts,
                    "{}: [{} layers, {} experts] differs from {}'s [{}, {}]", path,
                    window.num_layers, window.num_experts, stats_.front(),
                    scenarios.front().num_layers, scenarios.front().num_experts);
    }
    const plan::ExpertLoads combined =
        totals.size() == 1 ? totals.front() : plan::equal_weight_sum(totals);
    const plan::MoestatPlanOptions options{
        .objective = objective_ == "worst-case" ? plan::ScenarioObjective::kWorstCase
                                                : plan::ScenarioObjective::kExpected,
        .max_moves_per_layer = plan::MoestatPlanOptions{}.max_moves_per_layer};

    const Placement reference = plan::plan_deepseek(combined, config_);
    std::vector<std::int64_t> copies;
    std::optional<TargetOutcome> outcome;
    std::optional<Placement> chosen;
    if (!previous_.empty()) {
      MOESTAT_CHECK(algorithm_ == "moestat", "--previous needs --algorithm moestat");
      const Placement current = read_placement_file(
          previous_, {combined.num_layers, combined.num_experts, stats_.front()});
      plan::ReplanResult r = plan::replan_with_few_copies(
          current, scenarios, config_, {.target_balancedness = target_, .planner = options});
      copies = r.copies_per_layer;
      outcome = target_outcome(r, combined, target_);
      chosen = std::move(r.placement);
    } else if (algorithm_ == "moestat") {
      chosen = plan::plan_moestat(scenarios, config_, options);
    } else {
      MOESTAT_CHECK(cross_node_ == 0, "--cross-node-replicas needs --algorithm moestat");
      chosen = reference;
    }
    std::optional<plan::CrossNodeResult> relaxed;
    if (cross_node_ > 0) {
      relaxed = plan::relax_across_nodes(*chosen, scenarios, config_, cross_node_);
      chosen = relaxed->placement;
    }
    write_placement_file(out_, *chosen);
    output.keep();

    fmt::print("placement:   {} layers x {} slots on {} GPUs ({} {}), {} logical experts\n",
               chosen->num_layers(), chosen->num_physical_experts(), config_.num_gpus,
               config_.hierarchical() && config_.num_nodes > 1 ? "hierarchical:" : "global",
               config_.hierarchical() && config_.num_nodes > 1
                   ? fmt::format("{} groups on {} nodes", config_.num_groups, config_.num_nodes)
                   : std::string("policy"),
               chosen->num_logical_experts());
    fmt::print("algorithm:   {}{}, {}\n", algorithm_,
               previous_.empty() ? "" : " (movement-aware, from " + previous_ + ")",
               planned_on(scenarios.size()));
    // Several files are named as such; deepseek plans on no scenario. One scenario is its
    // own mean and the loads summed: nothing more to say.
    const bool several = scenarios.size() > 1;
    const std::string unit = stats_.size() > 1 ? "file" : "scenario";
    fmt::print("balancedness (mean over MoE layers of mean/max GPU load){}:\n",
               several
                   ? fmt::format(" per {}, their mean (the expected balancedness{}) and of "
                                 "the loads summed (what `moestat eval` reports first)",
                                 unit, algorithm_ == "moestat" ? ", which moestat plans for" : "")
                   : "");
    const auto balancedness = [&](const plan::ExpertLoads& loads, const Placement& placement) {
      return plan::evaluate_placement(loads, placement, config_.num_gpus).balancedness;
    };
    double chosen_sum = 0.0, reference_sum = 0.0;
    for (std::size_t s = 0; s < scenarios.size(); ++s) {
      const std::string name =
          stats_.size() > 1 ? stats_[s] : fmt::format("{} scenario {}", stats_.front(), s);
      const double chosen_b = balancedness(scenarios[s], *chosen);
      const double reference_b = balancedness(scenarios[s], reference);
      chosen_sum += chosen_b;
      reference_sum += reference_b;
      fmt::print("  {:.4f} (deepseek on the sum: {:.4f})  {}\n", chosen_b, reference_b, name);
    }
    if (several) {
      const double n = double(scenarios.size());
      fmt::print("  {:.4f} (deepseek on the sum: {:.4f})  expected: the mean over the {} {}s\n",
                 chosen_sum / n, reference_sum / n, scenarios.size(), unit);
      fmt::print("  {:.4f} (deepseek on the sum: {:.4f})  the loads summed{}\n",
                 balancedness(combined, *chosen), balancedness(combined, reference),
                 stats_.size() > 1 ? " (equal weight per file)" : "");
    }
    if (outcome) print_target_outcome(*outcome);
    if (!copies.empty()) {
      std::int64_t total = 0;
      for (const std::int64_t c : copies) total += c;
      fmt::print("copies:      {} expert-weight copies in all; per layer: {}\n", total,
                 fmt::join(copies, " "));
    }
    if (relaxed) {
      std::int64_t total = 0;
      for (const std::int64_t c : relaxed->cross_node_replicas) total += c;
      fmt::print(
          "cross-node:  {} replicas off their group's node ({} per layer at most), "
          "serving {:.4f} of the assignments\n",
          total, cross_node_, relaxed->cross_node_share);
    }
    fmt::print("wrote:       {}\n", out_);
    return kExitOk;
  }

 private:
  /// What the plan was made on, in words: moestat plans on scenarios, deepseek on one sum
  /// (so "2 scenarios" would misdescribe it).
  std::string planned_on(std::size_t num_scenarios) const {
    if (algorithm_ == "moestat") {
      return fmt::format("planned on {} scenario{}", num_scenarios, num_scenarios == 1 ? "" : "s");
    }
    if (stats_.size() > 1) {
      return fmt::format("planned on the equal-weight sum of {} files", stats_.size());
    }
    if (window_passes_ > 1) {
      return fmt::format("planned on the sum of the file's {} passes", window_passes_);
    }
    return "planned on the file's loads";
  }

  /// Says how close movement-aware replanning came to --target, and warns on stderr when it
  /// fell short: the placement is still written (the best found), but a user who asked for
  /// 0.95 must not take 0.78 for it.
  void print_target_outcome(const TargetOutcome& outcome) const {
    fmt::print(
        "target:      per-layer balancedness {} {} on {} of {} MoE layers; lowest {:.4f} "
        "(layer {}), mean {:.4f}\n",
        target_, outcome.missed == 0 ? "reached" : "missed",
        outcome.missed == 0 ? outcome.moe_layers : outcome.missed, outcome.moe_layers,
        outcome.lowest, outcome.lowest_layer, outcome.mean);
    if (outcome.missed == 0) return;
    std::fflush(stdout);
    fmt::print(stderr,
               "moestat plan: warning: --target {} missed on {} of {} MoE layers: reached "
               "{:.4f} at the lowest (layer {}), {:.4f} on average; neither moves from the "
               "previous placement nor a fresh moestat plan reach it there\n",
               target_, outcome.missed, outcome.moe_layers, outcome.lowest, outcome.lowest_layer,
               outcome.mean);
  }

  std::vector<std::string> stats_;
  std::int64_t window_passes_ = 0;  ///< Passes of the last --stats file (1 without a window).
  std::string algorithm_ = "moestat";
  plan::EplbConfig config_;
  std::string previous_;
  double target_ = 0.95;
  std::string objective_ = "expected";
  std::int64_t max_scenarios_ = kDefaultMaxScenarios;
  std::int64_t cross_node_ = 0;
  std::string out_;
};

}  // namespace

std::unique_ptr<Command> make_plan_command() { return std::make_unique<PlanCommand>(); }

}  // namespace moestat::cli
