// `moestat advise`: does rebalancing the placement in force pay for the weights it moves?
#include <fmt/format.h>

#include <moestat/error.hpp>
#include <moestat/io/output_file.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/plan/advisor.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.hpp"
#include "deployment_options.hpp"
#include "output_files.hpp"
#include "plan_files.hpp"

namespace moestat::cli {
namespace {

nlohmann::ordered_json estimate_json(const plan::Estimate& e) {
  return {{"value", e.value}, {"low", e.low}, {"high", e.high}};
}

std::string estimate_text(const plan::Estimate& e, const char* format) {
  return fmt::format(fmt::runtime(std::string(format) + " [" + format + ", " + format + "]"),
                     e.value, e.low, e.high);
}

class AdviseCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand(
        "advise", "Advise whether rebalancing the placement in force pays for its expert moves");
    sub->add_option("--stats", stats_,
                    std::string(kStatsFileHelp) +
                        ": the recent window, [W][L][E] with at least 2 passes with load")
        ->required();
    sub->add_option("--placement", placement_,
                    "The placement in force (.json, .pt or .safetensors): "
                    "physical_to_logical_map [L][P]")
        ->required();
    add_deployment_options(
        *sub, config_,
        {.taken = {DeploymentOption::kGpus, DeploymentOption::kGroups, DeploymentOption::kNodes},
         .help = {.groups = "Expert groups, as for moestat plan",
                  .nodes = "Nodes, as for moestat plan"}});
    sub->add_option("--pass-seconds", options_.seconds_per_balanced_pass,
                    "MoE seconds of one forward pass at balancedness 1 (every GPU as loaded as "
                    "the mean): a pass at served balancedness b takes this / b")
        ->required()
        ->check(kPositive);
    sub->add_option("--horizon", options_.horizon_passes,
                    "Passes the new placement is expected to serve before the next decision")
        ->required()
        ->check(kPositive);
    sub->add_option("--expert-bytes", options_.move_cost.bytes_per_expert,
                    "Bytes of one expert's weights in one layer; needs --link-bandwidth")
        ->check(kNonNegative);
    sub->add_option("--link-bandwidth", link_gb_per_second_,
                    "GB/s (10^9 bytes per second) each GPU receives at: the transfer takes "
                    "--expert-bytes x (the most slots one GPU refills) / this")
        ->check(kPositive);
    sub->add_option("--stall-per-expert", options_.move_cost.seconds_per_expert,
                    "Seconds of stall per refilled slot (adds to the transfer when both given)")
        ->check(kNonNegative);
    sub->add_option("--targets", options_.targets,
                    "Candidate plans: one movement-aware replan per target balancedness in "
                    "(0, 1], comma-separated; 1 is a full rebalance")
        ->delimiter(',')
        ->capture_default_str();
    sub->add_option("--bootstrap", options_.num_bootstrap,
                    "Bootstrap resamples of the judged passes for the intervals (0: none)")
        ->check(CLI::Range(std::int64_t{0}, std::int64_t{100000}))
        ->capture_default_str();
    sub->add_option("--confidence", options_.confidence, "Two-sided coverage of the intervals")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
    sub->add_option("--seed", options_.seed, "Seed of the bootstrap: same seed, same advice")
        ->capture_default_str();
    sub->add_flag("--require-confident-gain", options_.require_confident_gain,
                  "Rebalance only when the net gain's whole interval is positive");
    sub->add_option("--max-scenarios", options_.max_scenarios,
                    "The window's passes are merged into at most this many scenarios to plan on")
        ->check(CLI::Range(1, 1000000))
        ->capture_default_str();
    sub->add_option("--min-gain", options_.min_balancedness_gain,
                    "Rebalance only when the best plan lifts served balancedness by at least this")
        ->check(CLI::Range(0.0, 0.999999))
        ->capture_default_str();
    sub->add_option("--min-judged-passes", options_.min_evaluation_passes,
                    "Wait until the traffic to plan for leaves at least this many passes to judge "
                    "a plan on")
        ->check(CLI::Range(1, 1000000))
        ->capture_default_str();
    sub->add_flag("!--whole-window", options_.follow_regimes,
                  "Plan for the whole window as one traffic, not for its regimes");
    sub->add_option("--out", out_,
                    "Write the placement to run by extension (.json, .pt, .safetensors): the "
                    "best plan when the advice is to rebalance, else the placement in force");
    sub->add_flag("--json", json_, "Print one JSON object instead of text");
    sub->footer(
        "The window is cut into regimes (stretches whose expert mix stays within the passes'\n"
        "own noise): the advice is for the regime running now, or, when it ran before in the\n"
        "window, for every regime since its first run. Each candidate is planned on the older\n"
        "half of those passes and judged on the newer half (a bootstrap over those passes\n"
        "gives the intervals), so a plan is not credited for fitting the passes it was made\n"
        "on; the plans shown and written are then made on all of them. Served balancedness is\n"
        "the sum over passes and layers of\n"
        "the mean GPU load over the sum of the max GPU load. The gain is the MoE time saved\n"
        "over --horizon passes; the net gain subtracts the stall of the moves. See\n"
        "docs/placement.md, \"Rebalance advisor\".\n\n"
        "Example:\n"
        "  moestat advise --stats recent.json --placement placement.json --gpus 32 \\\n"
        "      --pass-seconds 0.012 --horizon 2000 --expert-bytes 44e6 --link-bandwidth 50 \\\n"
        "      --out next.json");
    return sub;
  }

  int run() override {
    const std::vector<std::filesystem::path> paths{out_};  // "" when not given: skipped
    OutputFiles output(paths, std::vector<std::string>{stats_, placement_});
    MOESTAT_CHECK(options_.move_cost.bytes_per_expert == 0.0 || link_gb_per_second_ > 0.0,
                  "--expert-bytes needs --link-bandwidth");
    options_.move_cost.link_bytes_per_second = link_gb_per_second_ * 1e9;
    const CountWindow window = io::read_counts(stats_, io::Fractions::kKeep);
    const Placement current =
        read_placement_file(placement_, {window.num_layers, window.num_experts, stats_});
    config_.num_replicas = current.num_physical_experts();
    const plan::RebalanceAdvice advice = plan::advise_rebalance(current, window, config_, options_);
    if (!out_.empty()) write_placement_file(out_, advice.placement);
    output.keep();
    if (json_) {
      print_json(advice);
    } else {
      print_text(advice, window);
    }
    return kExitOk;
  }

 private:
  static std::string traffic_text(const plan::RebalanceAdvice& advice) {
    if (advice.traffic_recurs) {
      return fmt::format(
          "the traffic running now also ran from pass {}: planned for the {} regimes since",
          advice.traffic_first_pass, advice.traffic_regimes);
    }
    if (advice.traffic_first_pass == 0) return "one regime throughout the window";
    return fmt::format("the traffic changed at pass {}: planned for the passes since",
                       advice.traffic_first_pass);
  }

  void print_text(const plan::RebalanceAdvice& advice, const CountWindow& window) const {
    fmt::print("decision:     {}\n", advice.rebalance ? "rebalance" : "keep the placement");
    fmt::print("why:          {}\n", advice.reason);
    fmt::print("traffic:      {}\n", traffic_text(advice));
    fmt::print(
        "window:       {} ({} passes): planned on {} older passes with load, judged on "
        "{} newer\n",
        stats_, window.window_size, advice.num_planning_passes, advice.num_evaluation_passes);
    fmt::print("balancedness: {} now (served; {:g}% interval)\n",
               estimate_text(advice.balancedness_now, "{:.4f}"), 100.0 * options_.confidence);
    fmt::print(
        "candidates:   target  moved  most/GPU  balancedness after        "
        "gain s                          move s     net gain s\n");
    // Targets whose replans are the same placement are one row ("0.85-1"), not copies.
    for (std::size_t k = 0; k < advice.candidates.size();) {
      const plan::RebalanceCandidate& c = advice.candidates[k];
      std::size_t end = k + 1;
      while (end < advice.candidates.size() &&
             advice.candidates[end].placement.same_maps(c.placement)) {
        ++end;
      }
      const bool best = std::int64_t(k) <= advice.best && advice.best < std::int64_t(end);
      const std::string targets = end == k + 1
                                      ? fmt::format("{:g}", c.target_balancedness)
                                      : fmt::format("{:g}-{:g}", c.target_balancedness,
                                                    advice.candidates[end - 1].target_balancedness);
      fmt::print("  {} {:<6}  {:<5}  {:<8}  {:<24}  {:<30}  {:<9.4g}  {}\n", best ? '*' : ' ',
                 targets, c.moved_experts, c.max_moved_per_gpu,
                 estimate_text(c.balancedness_after, "{:.4f}"),
                 estimate_text(c.gain_seconds, "{:.4g}"), c.move_seconds,
                 estimate_text(c.net_gain_seconds, "{:.4g}"));
      k = end;
    }
    if (!out_.empty()) {
      fmt::print("wrote:        {} ({})\n", out_,
                 advice.rebalance ? fmt::format("the plan: {} slots refilled", advice.moves.size())
                                  : std::string("the placement in force, unchanged"));
    }
  }

  void print_json(const plan::RebalanceAdvice& advice) const {
    nlohmann::ordered_json candidates = nlohmann::ordered_json::array();
    for (const plan::RebalanceCandidate& c : advice.candidates) {
      candidates.push_back({{"target_balancedness", c.target_balancedness},
                            {"moved_experts", c.moved_experts},
                            {"max_moved_per_gpu", c.max_moved_per_gpu},
                            {"balancedness_after", estimate_json(c.balancedness_after)},
                            {"gain_seconds", estimate_json(c.gain_seconds)},
                            {"move_seconds", c.move_seconds},
                            {"net_gain_seconds", estimate_json(c.net_gain_seconds)}});
    }
    nlohmann::ordered_json moves = nlohmann::ordered_json::array();
    for (const plan::SlotMove& m : advice.moves) {
      moves.push_back({{"layer", m.layer}, {"slot", m.slot}, {"from", m.from}, {"to", m.to}});
    }
    const nlohmann::ordered_json out{{"rebalance", advice.rebalance},
                                     {"reason", advice.reason},
                                     {"balancedness_now", estimate_json(advice.balancedness_now)},
                                     {"best", advice.best},
                                     {"candidates", candidates},
                                     {"moves", moves},
                                     {"num_planning_passes", advice.num_planning_passes},
                                     {"num_evaluation_passes", advice.num_evaluation_passes},
                                     {"traffic_first_pass", advice.traffic_first_pass},
                                     {"traffic_regimes", advice.traffic_regimes},
                                     {"traffic_recurs", advice.traffic_recurs}};
    fmt::print("{}\n", out.dump());
  }

  std::string stats_, placement_, out_;
  plan::EplbConfig config_;
  plan::AdvisorOptions options_;
  double link_gb_per_second_ = 0.0;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Command> make_advise_command() { return std::make_unique<AdviseCommand>(); }

}  // namespace moestat::cli
