// `moestat simulate`: replay recorded workloads as phases of traffic and compare when to
// rebalance: never, every N passes (SGLang's and vLLM's defaults and a tuned grid), below a
// utilisation threshold (SGLang's rule, tuned) and moestat's advisor.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <moestat/error.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/plan/replay.hpp>
#include <moestat/plan/traffic_scenarios.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "command.hpp"
#include "deployment_options.hpp"
#include "output_files.hpp"
#include "progress.hpp"
#include "simulate_policies.hpp"

namespace moestat::cli {
namespace {

namespace fs = std::filesystem;

/// The counts files of `dir` (.json, .pt, .safetensors), by name.
std::vector<fs::path> workload_files(const fs::path& dir) {
  MOESTAT_CHECK(fs::is_directory(dir), "{} is not a directory", dir.string());
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".json" || ext == ".pt" || ext == ".safetensors")) {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

/// What `file` holds when it is a statistics file other than counts (a placement, a mask);
/// nullopt for counts and for what is none of them.
std::optional<io::StatisticsKind> other_statistics_kind(const io::DetectedFile& file) {
  try {
    const io::StatisticsKind kind = io::statistics_kind(io::read_statistics_file(file));
    if (kind != io::StatisticsKind::kLogicalCounts) return kind;
  } catch (const Error&) {
  }
  return std::nullopt;
}

/// The workloads of --data, in name order: every counts file. A placement or a mask there
/// (the demo's folder holds both beside its counts) is not a workload: skipped, saying so.
std::vector<plan::NamedLoads> read_workloads(const fs::path& dir,
                                             const std::vector<fs::path>& files) {
  std::vector<plan::NamedLoads> workloads;
  for (const fs::path& path : files) {
    const io::DetectedFile file = io::read_detected_file(path);
    try {
      workloads.push_back(
          {path.filename().string(), plan::loads_of(io::read_counts(file, io::Fractions::kKeep))});
    } catch (const Error&) {
      const std::optional<io::StatisticsKind> kind = other_statistics_kind(file);
      if (!kind) throw;
      fmt::print("skipped: {} ({}: not a workload)\n", path.string(),
                 io::statistics_kind_name(*kind));
    }
  }
  MOESTAT_CHECK(workloads.size() >= 2,
                "{} holds {} counts files (.json, .pt, .safetensors); the scenarios need two",
                dir.string(), workloads.size());
  return workloads;
}

nlohmann::ordered_json replay_json(const plan::PolicyReplay& r, const std::string& role) {
  nlohmann::ordered_json rebalances = nlohmann::ordered_json::array();
  for (const plan::RebalanceEvent& e : r.rebalances) {
    rebalances.push_back({{"pass", e.pass},
                          {"moved_experts", e.moved_experts},
                          {"max_moved_per_gpu", e.max_moved_per_gpu},
                          {"seconds", e.seconds}});
  }
  return {{"policy", r.policy},
          {"role", role},
          {"mean_balancedness", r.mean_balancedness},
          {"moved_experts", r.moved_experts},
          {"imbalance_seconds", r.imbalance_seconds},
          {"move_seconds", r.move_seconds},
          {"lost_seconds", r.lost_seconds()},
          {"rebalances", rebalances},
          {"block_balancedness", r.block_balancedness}};
}

class SimulateCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand(
        "simulate", "Replay recorded workloads as traffic and compare rebalancing policies");
    sub->add_option("--data", data_,
                    "Directory of counts files (.json, .pt, .safetensors; [L][E] or a window, "
                    "summed), one workload each, taken in name order; placements and masks "
                    "there (a demo's --out) are skipped")
        ->required();
    sub->add_option("--seed", seed_, "Seed of the drawn passes (and of the advisor)")
        ->capture_default_str();
    sub->add_option("--passes", options_.num_passes, "Passes of each scenario")
        ->capture_default_str()
        ->check(kPositive);
    sub->add_option("--scenario", only_,
                    "Replay only this scenario (steady, shift, alternate, tour, noisy-shift); "
                    "repeat for several");
    sub->add_option("--policy", roles_,
                    "Replay only this family of policies (never, sglang-default, vllm-default, "
                    "interval, threshold, advisor); repeat for several. Every pass is drawn as in "
                    "a full run, so the rows replayed are the same as there")
        ->check(CLI::IsMember(policy_roles()));
    add_deployment_options(*sub, config_,
                           {.required = false,
                            .help = {.replicas = "Physical expert slots per layer",
                                     .groups = "Expert groups (hierarchical placement)"}});
    sub->add_option("--seconds-per-balanced-pass", cost_.seconds_per_balanced_pass,
                    "MoE seconds of one pass at perfect balance; a pass at balancedness b (sum "
                    "over layers of mean / of max GPU load) takes this / b")
        ->capture_default_str()
        ->check(kPositive);
    sub->add_option("--bytes-per-expert", cost_.move_cost.bytes_per_expert,
                    "Bytes of one expert's weights in one layer (default: DeepSeek-V3's three "
                    "FP8 matrices)")
        ->capture_default_str()
        ->check(kNonNegative);
    sub->add_option("--link-bytes-per-second", cost_.move_cost.link_bytes_per_second,
                    "Bytes per second each GPU receives; GPUs receive in parallel")
        ->capture_default_str()
        ->check(kPositive);
    sub->add_option("--seconds-per-expert", cost_.move_cost.seconds_per_expert,
                    "A fixed stall per moved expert, added to the transfer")
        ->capture_default_str()
        ->check(kNonNegative);
    sub->add_option("--json", json_,
                    "Also write every policy's replay (per-block balancedness timeline, "
                    "rebalance passes) as JSON")
        ->check(!CLI::ExistingDirectory);
    sub->footer(
        "Each scenario's passes are drawn once (tokens per pass, top-8, per-pass jitter of\n"
        "each expert's share) and served by every policy's placement. Score: mean served\n"
        "balancedness (SGLang's mean/max GPU load), experts moved, and lost seconds: time lost\n"
        "to imbalance (seconds-per-balanced-pass x (1/b - 1) per pass) plus the moves' stall\n"
        "(bytes x the most experts one GPU receives / link bandwidth, + seconds per expert),\n"
        "the advisor's model. 'best' rows are the grid's best lost seconds for that scenario,\n"
        "chosen after the fact. docs/placement.md, \"Online rebalancing on real traffic\",\n"
        "defines the scenarios.\n\n"
        "Example (the second command draws each scenario's timeline and table):\n"
        "  moestat simulate --data stats/ --seed 1 --json simulation.json\n"
        "  moestat report --simulation simulation.json --html simulation.html");
    return sub;
  }

  int run() override {
    const std::vector<fs::path> files = workload_files(data_);
    const fs::path json_path(json_);  // "" without --json: skipped
    std::vector<std::string> inputs;
    for (const fs::path& f : files) inputs.push_back(f.string());
    OutputFiles output({&json_path, 1}, inputs);
    const std::vector<plan::WorkloadScenario> scenarios =
        plan::workload_scenarios(read_workloads(data_, files), options_);
    for (const std::string& name : only_) {
      MOESTAT_CHECK(std::any_of(scenarios.begin(), scenarios.end(),
                                [&](const auto& s) { return s.traffic.name == name; }),
                    "no scenario is called '{}' (steady, shift, alternate, tour, noisy-shift)",
                    name);
    }
    const plan::ReplayOptions replay_options{.config = config_, .cost = cost_, .seed = seed_};

    const plan::MoveCost& move = cost_.move_cost;
    fmt::print("deployment: {} slots on {} GPUs, {} groups on {} nodes\n", config_.num_replicas,
               config_.num_gpus, config_.num_groups, config_.num_nodes);
    fmt::print(
        "cost: a balanced pass {} s; a move {:.0f} bytes per expert at {:.3g} bytes/s per "
        "GPU + {} s per expert\n",
        cost_.seconds_per_balanced_pass, move.bytes_per_expert, move.link_bytes_per_second,
        move.seconds_per_expert);
    const auto replayed = [&](const plan::WorkloadScenario& scenario) {
      return only_.empty() ||
             std::find(only_.begin(), only_.end(), scenario.traffic.name) != only_.end();
    };
    // A scenario's replay takes tens of seconds at the default --passes.
    ProgressBar progress(std::count_if(scenarios.begin(), scenarios.end(), replayed), "scenario");
    std::int64_t done = 0;
    nlohmann::ordered_json out_scenarios = nlohmann::ordered_json::array();
    for (const plan::WorkloadScenario& scenario : scenarios) {
      if (!replayed(scenario)) continue;
      progress.update(done++, fmt::format("({}: replaying every policy)", scenario.traffic.name));
      const PolicyRoster roster = simulation_policies(seed_, cost_).only(roles_);
      const std::vector<plan::PolicyReplay> results =
          plan::replay(scenario.traffic, plan::initial_placement(scenario, config_),
                       roster.policies, replay_options);
      progress.finish();
      print_table(scenario.traffic, roster, results);
      nlohmann::ordered_json policies = nlohmann::ordered_json::array();
      for (std::size_t i = 0; i < results.size(); ++i) {
        policies.push_back(replay_json(results[i], roster.roles[i]));
      }
      nlohmann::ordered_json phases = nlohmann::ordered_json::array();
      for (const plan::TrafficPhase& phase : scenario.traffic.phases) {
        phases.push_back({{"workload", phase.name},
                          {"num_passes", phase.shape.num_passes},
                          {"tokens_per_pass", phase.shape.tokens_per_pass},
                          {"jitter", phase.shape.jitter}});
      }
      out_scenarios.push_back({{"name", scenario.traffic.name},
                               {"description", scenario.traffic.description},
                               {"num_passes", scenario.traffic.num_passes()},
                               {"block_passes", replay_options.block_passes},
                               {"phases", phases},
                               {"policies", policies}});
    }
    if (!json_.empty()) {
      const nlohmann::ordered_json doc{
          {"seed", seed_},
          {"deployment",
           {{"num_replicas", config_.num_replicas},
            {"num_groups", config_.num_groups},
            {"num_nodes", config_.num_nodes},
            {"num_gpus", config_.num_gpus}}},
          {"cost",
           {{"seconds_per_balanced_pass", cost_.seconds_per_balanced_pass},
            {"bytes_per_expert", move.bytes_per_expert},
            {"link_bytes_per_second", move.link_bytes_per_second},
            {"seconds_per_expert", move.seconds_per_expert}}},
          {"scenarios", out_scenarios}};
      io::write_file_atomically(json_path, doc.dump() + "\n");
      fmt::print("wrote: {}\n", json_);
    }
    output.keep();
    return kExitOk;
  }

 private:
  static void print_table(const plan::TrafficScenario& scenario, const PolicyRoster& roster,
                          const std::vector<plan::PolicyReplay>& results) {
    fmt::print("\n{}: {} ({} passes)\n", scenario.name, scenario.description,
               scenario.num_passes());
    fmt::print("  {:<16} {:<40} {:>8} {:>7} {:>6} {:>9}\n", "", "policy", "balanced", "moved",
               "moves", "lost s");
    for (const auto& [i, label] : roster.shown(results)) {
      const plan::PolicyReplay& r = results[i];
      fmt::print("  {:<16} {:<40} {:>8.4f} {:>7} {:>6} {:>9.2f}\n", label, r.policy,
                 r.mean_balancedness, r.moved_experts, r.rebalances.size(), r.lost_seconds());
    }
  }

  std::string data_, json_;
  std::vector<std::string> only_, roles_;
  std::uint64_t seed_ = 1;
  plan::ScenarioOptions options_{};
  /// DeepSeek-V3's deployment unless the command line names another.
  plan::EplbConfig config_{.num_replicas = 288, .num_groups = 8, .num_nodes = 4, .num_gpus = 32};
  plan::ReplayCost cost_{};
};

}  // namespace

std::unique_ptr<Command> make_simulate_command() { return std::make_unique<SimulateCommand>(); }

}  // namespace moestat::cli
