// The policies `moestat simulate` compares.
#include "simulate_policies.hpp"

#include <algorithm>

namespace moestat::cli {

std::vector<std::string> policy_roles() {
  std::vector<std::string> out;
  for (const plan::ComparisonRow& row : plan::kComparisonRows) out.emplace_back(row.role);
  return out;
}

PolicyRoster simulation_policies(std::uint64_t seed, const plan::ReplayCost& cost) {
  using plan::Replanner;
  PolicyRoster roster;
  auto add = [&](std::string role, std::unique_ptr<plan::RebalancePolicy> policy) {
    roster.roles.push_back(std::move(role));
    roster.policies.push_back(std::move(policy));
  };
  add("never", plan::never_policy());
  // SGLang: eplb_rebalance_num_iterations = 1000, its recorder's buffer (the window) the same,
  // eplb_min_rebalancing_utilization_threshold = 1.0. vLLM: step_interval = 3000,
  // window_size = 1000.
  add("sglang-default", plan::threshold_policy({.every = 1000, .window = 1000}, 1.0));
  add("vllm-default", plan::interval_policy({.every = 3000, .window = 1000}));
  // The grids. Few-copies replanning costs far more time per plan than DeepSeek's EPLB, so
  // its grid is the part of DeepSeek's that can win: frequent checks.
  for (const std::int64_t every : {250, 500, 1000, 2000, 4000}) {
    add("interval",
        plan::interval_policy({.every = every, .window = std::min<std::int64_t>(every, 1000)}));
  }
  for (const std::int64_t every : {250, 1000}) {
    for (const double threshold : {0.7, 0.8, 0.9}) {
      add("threshold", plan::threshold_policy({.every = every, .window = every}, threshold));
    }
  }
  add("interval",
      plan::interval_policy({.every = 1000, .window = 1000, .replanner = Replanner::kFewCopies}));
  for (const double threshold : {0.7, 0.8}) {
    add("threshold",
        plan::threshold_policy({.every = 250, .window = 250, .replanner = Replanner::kFewCopies},
                               threshold));
  }
  // The advisor prices time and moves as the replay does; it expects a plan to serve about
  // a phase (its horizon), and asks often, since it moves only when that pays.
  plan::AdvisorOptions advisor;
  advisor.seconds_per_balanced_pass = cost.seconds_per_balanced_pass;
  advisor.horizon_passes = 2000;
  advisor.move_cost = cost.move_cost;
  advisor.num_bootstrap = 200;
  advisor.seed = seed;
  advisor.require_confident_gain = true;  // blocks of passes are few: act on the interval
  add("advisor", plan::advisor_policy({.every = 100, .window = 2000}, advisor));
  return roster;
}

PolicyRoster PolicyRoster::only(const std::vector<std::string>& wanted) && {
  if (wanted.empty()) return std::move(*this);
  PolicyRoster out;
  for (std::size_t i = 0; i < policies.size(); ++i) {
    if (std::find(wanted.begin(), wanted.end(), roles[i]) == wanted.end()) continue;
    out.roles.push_back(std::move(roles[i]));
    out.policies.push_back(std::move(policies[i]));
  }
  return out;
}

std::vector<std::pair<std::size_t, std::string>> PolicyRoster::shown(
    const std::vector<plan::PolicyReplay>& results) const {
  std::vector<double> lost;
  for (const plan::PolicyReplay& r : results) lost.push_back(r.lost_seconds());
  std::vector<std::pair<std::size_t, std::string>> rows;
  for (const auto& [row, policy] : plan::comparison_rows(roles, lost)) {
    rows.emplace_back(policy, std::string(plan::kComparisonRows[row].label));
  }
  return rows;
}

}  // namespace moestat::cli
