// LiveMetrics: the passes recorded since the previous update, read as GPU loads and folded one
// by one.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <moestat/error.hpp>
#include <moestat/gpu_loads.hpp>
#include <moestat/online/live_metrics.hpp>
#include <utility>

namespace moestat::online {
namespace {

constexpr std::int64_t kHistoryLength = kBalancednessWindows[std::size(kBalancednessWindows) - 1];

bool keeps_pass_window(RecordMode mode) {
  return mode == RecordMode::kStat || mode == RecordMode::kStatApprox ||
         mode == RecordMode::kPerPass;
}

std::vector<std::string> names_of_layers(std::vector<std::string> names, std::int64_t num_layers) {
  if (names.empty()) {
    for (std::int64_t layer = 0; layer < num_layers; ++layer)
      names.push_back(fmt::format("{}", layer));
  }
  MOESTAT_CHECK(std::int64_t(names.size()) == num_layers,
                "live metrics: {} layer names given for a model of {} layers", names.size(),
                num_layers);
  return names;
}

/// The `count` most assigned (layer, expert) pairs of logical totals [L, E].
std::vector<HotExpert> hottest_experts(std::span<const std::int64_t> totals,
                                       std::int64_t num_experts, std::int64_t count) {
  std::vector<HotExpert> experts;
  for (std::size_t cell = 0; cell < totals.size(); ++cell) {
    if (totals[cell] > 0) {
      experts.push_back(
          {std::int64_t(cell) / num_experts, std::int64_t(cell) % num_experts, totals[cell]});
    }
  }
  const auto hotter = [](const HotExpert& a, const HotExpert& b) {
    return a.assignments != b.assignments
               ? a.assignments > b.assignments
               : std::pair(a.layer, a.expert) < std::pair(b.layer, b.expert);
  };
  const std::size_t kept = std::min(experts.size(), std::size_t(count));
  std::partial_sort(experts.begin(), experts.begin() + std::ptrdiff_t(kept), experts.end(), hotter);
  experts.resize(kept);
  return experts;
}

}  // namespace

std::vector<std::string> MetricValues::uncovered_layers() const {
  std::vector<std::string> names;
  for (std::size_t layer = 0; layer < uncovered_passes.size(); ++layer) {
    if (uncovered_passes[layer] > 0) names.push_back(layer_names[layer]);
  }
  return names;
}

LiveMetrics::LiveMetrics(const Recorder& recorder, LiveMetricsOptions options)
    : recorder_(recorder), num_hottest_experts_(options.num_hottest_experts) {
  const ModelTopology& topology = recorder.topology();
  MOESTAT_CHECK(keeps_pass_window(recorder.options().mode),
                "live metrics need a recorder that keeps passes (stat, stat_approx or per_pass), "
                "not {}",
                record_mode_name(recorder.options().mode));
  const std::int64_t num_gpus = options.num_gpus == 0 ? topology.ep_size : options.num_gpus;
  try {
    slots_per_gpu(topology.num_physical_experts, num_gpus);
  } catch (const Error& error) {
    throw error.with_context("live metrics");
  }
  MOESTAT_CHECK(num_hottest_experts_ >= 0,
                "live metrics: the number of hottest experts must be >= 0, not {}",
                num_hottest_experts_);
  const auto cells = std::size_t(topology.num_layers * num_gpus);
  values_.num_layers = topology.num_layers;
  values_.num_gpus = num_gpus;
  values_.layer_names = names_of_layers(std::move(options.layer_names), topology.num_layers);
  values_.moe_layers = topology.moe_layers;
  values_.last_pass_gpu_loads.assign(cells, 0);
  values_.gpu_assignments_total.assign(cells, 0);
  values_.uncovered_passes.assign(std::size_t(topology.num_layers), 0);
  logical_totals_.assign(std::size_t(topology.num_layers * topology.num_logical_experts), 0);
  for (const std::int64_t window : kBalancednessWindows) {
    values_.balancedness_means.push_back({window, 0, 0.0});
  }
}

void LiveMetrics::fold_pass(std::int64_t pass_id, const std::int64_t* gpu_loads,
                            double balancedness) {
  const std::int64_t num_layers = values_.num_layers, num_gpus = values_.num_gpus;
  std::vector<std::int64_t>& loads = values_.last_pass_gpu_loads;
  std::copy(gpu_loads, gpu_loads + num_layers * num_gpus, loads.begin());
  for (std::size_t cell = 0; cell < loads.size(); ++cell) {
    values_.gpu_assignments_total[cell] += loads[cell];
  }
  // Counts are never negative: a layer counted something exactly when one of its GPUs has load.
  std::vector<bool> counted(std::size_t(num_layers), false);
  for (std::size_t cell = 0; cell < loads.size(); ++cell) {
    if (loads[cell] > 0) counted[cell / std::size_t(num_gpus)] = true;
  }
  const bool any_counted = std::find(counted.begin(), counted.end(), true) != counted.end();
  // NOTE: a pass in which no layer counted (recording on, no tokens) names no layer.
  for (std::int64_t layer = 0; layer < num_layers; ++layer) {
    if (any_counted && values_.moe_layers[std::size_t(layer)] && !counted[std::size_t(layer)]) {
      ++values_.uncovered_passes[std::size_t(layer)];
    }
  }
  values_.last_pass_id = pass_id;
  values_.last_pass_balancedness = balancedness;
  history_.push_back(balancedness);
  if (std::int64_t(history_.size()) > kHistoryLength) history_.pop_front();
  ++values_.passes_observed;
}

MetricValues LiveMetrics::update() {
  // NOTE: the read is under the lock so that concurrent updates fold each pass once; it
  // reads only the passes since the previous read, which is what keeps it short.
  std::lock_guard lock(mutex_);
  const GpuLoadsSince passes =
      recorder_.gpu_loads_since(generation_, next_arrival_, values_.num_gpus);
  generation_ = passes.generation;
  next_arrival_ = passes.next_arrival();
  values_.passes_unobserved += passes.missed_passes;
  const std::int64_t pass_loads = passes.num_layers * passes.num_gpus;
  for (std::int64_t row = 0; row < passes.size(); ++row) {
    fold_pass(passes.pass_ids[std::size_t(row)], passes.gpu_loads.data() + row * pass_loads,
              passes.balancedness[std::size_t(row)]);
  }
  std::transform(logical_totals_.begin(), logical_totals_.end(), passes.logical_totals.begin(),
                 logical_totals_.begin(), std::plus<>());

  values_.passes_recorded = passes.num_passes;
  values_.passes_dropped = passes.dropped_passes;
  values_.dropped_ids = passes.dropped_ids;
  for (BalancednessMean& mean : values_.balancedness_means) {
    mean.num_passes = std::min<std::int64_t>(mean.window, std::int64_t(history_.size()));
    double sum = 0.0;
    for (auto value = history_.end() - mean.num_passes; value != history_.end(); ++value)
      sum += *value;
    mean.value = mean.num_passes > 0 ? sum / double(mean.num_passes) : 0.0;
  }
  values_.hottest_experts =
      hottest_experts(logical_totals_, passes.num_logical_experts, num_hottest_experts_);
  return values_;
}

}  // namespace moestat::online
