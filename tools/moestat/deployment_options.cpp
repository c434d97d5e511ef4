// The deployment options, each defined once.
#include "deployment_options.hpp"

#include <string>

#include "command.hpp"

namespace moestat::cli {

void add_deployment_options(CLI::App& command, plan::EplbConfig& deployment,
                            const DeploymentOptions& options) {
  const DeploymentHelp& help = options.help;
  for (const DeploymentOption option : options.taken) {
    switch (option) {
      case DeploymentOption::kReplicas: {
        CLI::Option* replicas =
            command.add_option("--replicas", deployment.num_replicas, std::string(help.replicas));
        if (options.required) {
          replicas->required()->check(CLI::Range(std::int64_t{1}, plan::kMaxReplicas));
        } else {
          replicas->check(kPositive)->capture_default_str();
        }
        break;
      }
      case DeploymentOption::kGroups:
        command.add_option("--groups", deployment.num_groups, std::string(help.groups))
            ->check(kPositive)
            ->capture_default_str();
        break;
      case DeploymentOption::kNodes:
        command.add_option("--nodes", deployment.num_nodes, std::string(help.nodes))
            ->check(kPositive)
            ->capture_default_str();
        break;
      case DeploymentOption::kGpus: {
        CLI::Option* gpus =
            command.add_option("--gpus", deployment.num_gpus, std::string(help.gpus))
                ->check(kPositive);
        if (options.required) {
          gpus->required();
        } else {
          gpus->capture_default_str();
        }
        break;
      }
    }
  }
}

}  // namespace moestat::cli
