// The replay loop: every policy serves the same drawn passes; blocks of passes feed their
// windows and timelines.
#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <moestat/error.hpp>
#include <moestat/plan/replay.hpp>
#include <optional>

namespace moestat::plan {
namespace {

/// served_balance without the shape checks, for the replay's inner loop.
ServedBalance served_balance_unchecked(const ExpertLoads& pass, const Placement& placement,
                                       std::int64_t num_gpus, std::vector<double>& gpu_load) {
  const std::int64_t slots = placement.num_physical_experts();
  const std::int64_t slots_per_gpu = slots / num_gpus;
  const std::int64_t num_experts = pass.num_experts;
  const auto map = placement.physical_to_logical();
  const auto replicas = placement.replica_counts();
  gpu_load.resize(std::size_t(num_gpus));
  double ratio_sum = 0.0, mean_sum = 0.0, max_sum = 0.0;
  std::int64_t loaded = 0;
  for (std::int64_t l = 0; l < pass.num_layers; ++l) {
    const auto row = pass.row(l);
    std::fill(gpu_load.begin(), gpu_load.end(), 0.0);
    double total = 0.0;
    for (std::int64_t p = 0; p < slots; ++p) {
      const std::int32_t e = map[std::size_t(l * slots + p)];
      const double share = row[std::size_t(e)] / replicas[std::size_t(l * num_experts + e)];
      gpu_load[std::size_t(p / slots_per_gpu)] += share;
      total += share;
    }
    if (total <= 0.0) continue;  // dense layer: not scored
    const double mean = total / double(num_gpus);
    const double max = *std::max_element(gpu_load.begin(), gpu_load.end());
    ratio_sum += mean / max;
    mean_sum += mean;
    max_sum += max;
    ++loaded;
  }
  if (loaded == 0) return {};
  return {.balancedness = ratio_sum / double(loaded), .sum_ratio = mean_sum / max_sum};
}

/// One policy's running state.
struct Lane {
  RebalancePolicy* policy;
  // Shared: lanes that never moved serve under one placement, scored once per pass.
  std::shared_ptr<const Placement> placement;
  std::int64_t window_blocks = 0;
  double block_sum = 0.0;             // served balancedness summed over the open block
  std::deque<double> recent_means{};  // block means, newest last, at most window_blocks
  PolicyReplay result{};
};

void check_policy(const RebalancePolicy& policy, std::int64_t block) {
  const std::int64_t every = policy.check_every(), window = policy.window_passes();
  if (every == 0) return;  // never asked
  MOESTAT_CHECK(every > 0 && every % block == 0 && window > 0 && window % block == 0,
                "policy '{}': its interval ({}) and window ({}) must be positive multiples of "
                "the {} passes of a block",
                policy.name(), every, window, block);
}

/// The last `blocks` rows of `ring` as a window.
CountWindow window_of(const std::deque<std::vector<std::int64_t>>& ring, std::int64_t blocks,
                      std::int64_t num_layers, std::int64_t num_experts) {
  const auto n = std::min<std::int64_t>(blocks, std::int64_t(ring.size()));
  CountWindow window{.window_size = n,
                     .num_layers = num_layers,
                     .num_experts = num_experts,
                     .has_window_axis = true};
  window.counts.reserve(std::size_t(n * num_layers * num_experts));
  for (auto it = ring.end() - n; it != ring.end(); ++it) {
    window.counts.insert(window.counts.end(), it->begin(), it->end());
  }
  return window;
}

}  // namespace

std::vector<std::pair<std::size_t, std::size_t>> comparison_rows(
    std::span<const std::string> roles, std::span<const double> lost_seconds) {
  MOESTAT_CHECK(roles.size() == lost_seconds.size(),
                "a comparison needs one role per policy: {} roles for {} policies", roles.size(),
                lost_seconds.size());
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t row = 0; row < kComparisonRows.size(); ++row) {
    std::optional<std::size_t> best;
    for (std::size_t i = 0; i < roles.size(); ++i) {
      if (roles[i] != kComparisonRows[row].role) continue;
      if (!best || lost_seconds[i] < lost_seconds[*best]) best = i;
    }
    if (best) out.emplace_back(row, *best);
  }
  return out;
}

ServedBalance served_balance(const ExpertLoads& pass, const Placement& placement,
                             std::int64_t num_gpus) {
  pass.validate();
  MOESTAT_CHECK(placement.num_layers() == pass.num_layers &&
                    placement.num_logical_experts() == pass.num_experts,
                "the placement is for {} layers of {} experts, the pass has {} of {}",
                placement.num_layers(), placement.num_logical_experts(), pass.num_layers,
                pass.num_experts);
  MOESTAT_CHECK(num_gpus >= 1 && placement.num_physical_experts() % num_gpus == 0,
                "{} slots do not split evenly over {} GPUs", placement.num_physical_experts(),
                num_gpus);
  std::vector<double> gpu_load;
  return served_balance_unchecked(pass, placement, num_gpus, gpu_load);
}

Moves moves_between(const Placement& before, const Placement& after, const EplbConfig& config) {
  MOESTAT_CHECK(before.num_layers() == after.num_layers() &&
                    before.num_physical_experts() == after.num_physical_experts() &&
                    before.num_physical_experts() == config.num_replicas &&
                    config.num_replicas % config.num_gpus == 0,
                "placements of different shapes: [{}, {}] and [{}, {}], for {} slots on {} GPUs",
                before.num_layers(), before.num_physical_experts(), after.num_layers(),
                after.num_physical_experts(), config.num_replicas, config.num_gpus);
  const auto a = before.physical_to_logical();
  const auto b = after.physical_to_logical();
  const std::int64_t slots = config.num_replicas, per_gpu = config.slots_per_gpu();
  std::vector<std::int64_t> received(std::size_t(config.num_gpus), 0);
  Moves moves;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    ++moves.moved_experts;
    ++received[std::size_t((std::int64_t(i) % slots) / per_gpu)];
  }
  moves.max_moved_per_gpu = *std::max_element(received.begin(), received.end());
  return moves;
}

double move_seconds(const MoveCost& cost, const Moves& moves) {
  const double transfer =
      cost.bytes_per_expert > 0.0
          ? cost.bytes_per_expert * double(moves.max_moved_per_gpu) / cost.link_bytes_per_second
          : 0.0;
  return transfer + cost.seconds_per_expert * double(moves.moved_experts);
}

std::vector<PolicyReplay> replay(const TrafficScenario& scenario, const Placement& initial,
                                 std::span<const std::unique_ptr<RebalancePolicy>> policies,
                                 const ReplayOptions& options) {
  scenario.validate();
  const std::int64_t num_layers = scenario.phases.front().shares.num_layers;
  const std::int64_t num_experts = scenario.phases.front().shares.num_experts;
  const EplbConfig& config = options.config;
  config.validate(num_experts);
  MOESTAT_CHECK(initial.num_layers() == num_layers &&
                    initial.num_logical_experts() == num_experts &&
                    initial.num_physical_experts() == config.num_replicas,
                "the initial placement is [{}, {}] for {} experts; the scenario and deployment "
                "need [{}, {}] for {}",
                initial.num_layers(), initial.num_physical_experts(), initial.num_logical_experts(),
                num_layers, config.num_replicas, num_experts);
  const std::int64_t block = options.block_passes;
  MOESTAT_CHECK(block >= 1, "a block must hold at least one pass, got {}", block);
  const ReplayCost& cost = options.cost;
  const MoveCost& move = cost.move_cost;
  MOESTAT_CHECK(
      std::isfinite(cost.seconds_per_balanced_pass) && cost.seconds_per_balanced_pass > 0.0,
      "the time of a balanced pass must be positive, got {} seconds",
      cost.seconds_per_balanced_pass);
  MOESTAT_CHECK(std::isfinite(move.bytes_per_expert) && move.bytes_per_expert >= 0.0 &&
                    std::isfinite(move.seconds_per_expert) && move.seconds_per_expert >= 0.0 &&
                    std::isfinite(move.link_bytes_per_second) &&
                    (move.bytes_per_expert == 0.0 || move.link_bytes_per_second > 0.0),
                "a move's cost needs finite, non-negative bytes and seconds per expert and a "
                "positive link bandwidth for its bytes (got {} bytes, {} bytes/s, {} s)",
                move.bytes_per_expert, move.link_bytes_per_second, move.seconds_per_expert);

  const auto start = std::make_shared<const Placement>(initial);
  std::vector<Lane> lanes;
  std::int64_t ring_blocks = 0;
  for (const auto& policy : policies) {
    MOESTAT_CHECK(policy != nullptr, "a policy is missing");
    check_policy(*policy, block);
    Lane lane{.policy = policy.get(), .placement = start};
    lane.window_blocks = policy->check_every() == 0 ? 0 : policy->window_passes() / block;
    lane.result.policy = policy->name();
    ring_blocks = std::max(ring_blocks, lane.window_blocks);
    lanes.push_back(std::move(lane));
  }

  const std::int64_t num_passes = scenario.num_passes();
  TrafficSampler sampler(scenario, options.seed);
  ExpertLoads pass;
  std::vector<double> gpu_load;
  std::deque<std::vector<std::int64_t>> ring;  // closed blocks' counts, newest last
  std::vector<std::int64_t> open_block(std::size_t(num_layers * num_experts), 0);
  std::int64_t in_block = 0;
  // This pass's balance under each distinct placement in force.
  std::vector<std::pair<const Placement*, ServedBalance>> scored;
  const auto score = [&](const std::shared_ptr<const Placement>& placement) {
    for (const auto& [p, b] : scored) {
      if (p == placement.get()) return b;
    }
    scored.emplace_back(placement.get(),
                        served_balance_unchecked(pass, *placement, config.num_gpus, gpu_load));
    return scored.back().second;
  };
  while (sampler.next(pass)) {
    const std::int64_t served = sampler.passes_drawn();
    scored.clear();
    for (Lane& lane : lanes) {
      const ServedBalance b = score(lane.placement);
      lane.block_sum += b.balancedness;
      lane.result.mean_balancedness += b.balancedness;
      lane.result.imbalance_seconds += cost.seconds_per_balanced_pass * (1.0 / b.sum_ratio - 1.0);
    }
    for (std::size_t i = 0; i < open_block.size(); ++i) {
      open_block[i] += std::int64_t(pass.values[i]);
    }
    ++in_block;
    if (in_block < block && served < num_passes) continue;

    // A block closes: timelines, windows, then the decisions due.
    for (Lane& lane : lanes) {
      const double mean = lane.block_sum / double(in_block);
      lane.result.block_balancedness.push_back(mean);
      lane.recent_means.push_back(mean);
      if (std::int64_t(lane.recent_means.size()) > lane.window_blocks) {
        lane.recent_means.pop_front();
      }
      lane.block_sum = 0.0;
    }
    if (ring_blocks > 0) {
      ring.push_back(open_block);
      if (std::int64_t(ring.size()) > ring_blocks) ring.pop_front();
    }
    std::fill(open_block.begin(), open_block.end(), 0);
    in_block = 0;
    if (served == num_passes) break;  // no pass left to serve under a new placement

    for (Lane& lane : lanes) {
      const std::int64_t every = lane.policy->check_every();
      if (every == 0 || served % every != 0) continue;
      const CountWindow window = window_of(ring, lane.window_blocks, num_layers, num_experts);
      double window_b = 0.0;
      for (double m : lane.recent_means) window_b += m;
      window_b /= double(lane.recent_means.size());
      const RebalanceView view{.pass = served,
                               .placement = *lane.placement,
                               .window = window,
                               .block_passes = block,
                               .window_balancedness = window_b,
                               .config = config};
      std::optional<Placement> next = lane.policy->decide(view);
      if (!next) continue;
      MOESTAT_CHECK(next->num_logical_experts() == num_experts,
                    "policy '{}' returned a placement of {} experts, not {}", lane.result.policy,
                    next->num_logical_experts(), num_experts);
      const Moves moves = moves_between(*lane.placement, *next, config);
      if (moves.moved_experts == 0) continue;
      const double seconds = move_seconds(move, moves);
      lane.result.rebalances.push_back({.pass = served,
                                        .moved_experts = moves.moved_experts,
                                        .max_moved_per_gpu = moves.max_moved_per_gpu,
                                        .seconds = seconds});
      lane.result.moved_experts += moves.moved_experts;
      lane.result.move_seconds += seconds;
      lane.placement = std::make_shared<const Placement>(std::move(*next));
    }
  }

  std::vector<PolicyReplay> results;
  for (Lane& lane : lanes) {
    lane.result.num_passes = num_passes;
    lane.result.mean_balancedness /= double(num_passes);
    results.push_back(std::move(lane.result));
  }
  return results;
}

}  // namespace moestat::plan
