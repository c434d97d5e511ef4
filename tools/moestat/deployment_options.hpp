// The deployment a placement is planned for or judged on, as the commands take it (--replicas,
// --groups, --nodes, --gpus): each option's name, check and field defined once, for plan,
// advise, simulate and eval.
#pragma once

#include <CLI/CLI.hpp>
#include <moestat/plan/eplb.hpp>
#include <string_view>
#include <vector>

namespace moestat::cli {

/// One deployment option, by what it sets in plan::EplbConfig.
enum class DeploymentOption {
  kReplicas,  ///< --replicas: num_replicas, physical expert slots per layer (P).
  kGroups,    ///< --groups: num_groups.
  kNodes,     ///< --nodes: num_nodes.
  kGpus,      ///< --gpus: num_gpus, expert-parallel ranks (R).
};

/// What a command's --help says of each deployment option: plan's words unless the command
/// words one its own way (advise points to plan, eval says where a slot lives).
struct DeploymentHelp {
  std::string_view replicas = "Physical expert slots per layer (P)";
  std::string_view groups = "Expert groups";
  std::string_view nodes = "Nodes";
  std::string_view gpus = "GPUs (expert-parallel ranks)";
};

/// Which deployment options a command takes and how it shows them.
struct DeploymentOptions {
  /// The options, in the order --help lists them (advise reads the slots from the placement
  /// in force, so it takes no --replicas; eval needs only --gpus).
  std::vector<DeploymentOption> taken{DeploymentOption::kReplicas, DeploymentOption::kGroups,
                                      DeploymentOption::kNodes, DeploymentOption::kGpus};
  /// Whether --replicas and --gpus must be given, for a command that has no deployment to
  /// assume; --replicas is then held to plan::kMaxReplicas as it is parsed. Otherwise the
  /// deployment's values are their defaults (simulate's: DeepSeek-V3's).
  bool required = true;
  DeploymentHelp help;
};

/// Adds `options.taken` to `command`, each filling its field of `deployment` (positive
/// integers; --groups and --nodes, and the others where not required, default to the values
/// `deployment` holds, which --help shows). `deployment` must outlive the parse.
void add_deployment_options(CLI::App& command, plan::EplbConfig& deployment,
                            const DeploymentOptions& options = {});

}  // namespace moestat::cli
