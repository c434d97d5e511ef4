// Planner and hot-expert mask speed at DeepSeek-V3 shape (61 layers, the first 3 dense, 256
// experts, 288 slots; hierarchical 8 groups / 4 nodes / 32 GPUs, and global 72 GPUs), with a
// straightforward implementation of the reference in the same run as the baseline.
//
// Loads: the synthetic workload's per-layer Zipf popularity (hottest expert 4-14x the mean,
// as in DeepSeek-V3 production), scaled to 10^8 assignments per layer; scenarios are the
// same model under other seeds.
//
// Run (Release build):
//   moestat_bench_plan --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//                      --benchmark_out=bench/results/plan_<date>.json
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <moestat/plan/eplb.hpp>
#include <moestat/plan/hot_experts.hpp>
#include <moestat/plan/metrics.hpp>
#include <moestat/workload.hpp>
#include <numeric>
#include <vector>

namespace moestat::bench {
namespace {

plan::ExpertLoads synthetic_loads(std::uint64_t seed) {
  workload::SyntheticOptions options;
  options.seed = seed;
  const workload::SyntheticWorkload work(workload::preset("deepseek-v3"), options);
  const ModelTopology& t = work.topology();
  plan::ExpertLoads loads{t.num_layers, t.num_logical_experts, {}};
  for (const double p : work.popularity()) loads.values.push_back(std::round(p * 1e8));
  return loads;
}

const plan::EplbConfig kHierarchical{288, 8, 4, 32};
const plan::EplbConfig kGlobal{288, 1, 1, 72};

const plan::EplbConfig& config_of(const benchmark::State& state) {
  return state.range(0) == 0 ? kHierarchical : kGlobal;
}

// ---- The baseline: eplb.py's steps written plainly (linear scans, no heaps) ----

/// Pack items heaviest first, each into the lightest pack with room (linear scan).
void naive_packing(const std::vector<float>& weight, std::int64_t packs,
                   std::vector<std::int64_t>& pack_of, std::vector<std::int64_t>& rank) {
  const auto n = std::int64_t(weight.size());
  const std::int64_t cap = n / packs;
  pack_of.assign(weight.size(), 0);
  rank.assign(weight.size(), 0);
  if (cap == 1) {
    std::iota(pack_of.begin(), pack_of.end(), 0);
    return;
  }
  std::vector<std::int64_t> order(weight.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return weight[std::size_t(a)] > weight[std::size_t(b)];
  });
  std::vector<float> load(static_cast<std::size_t>(packs), 0.0F);
  std::vector<std::int64_t> items(std::size_t(packs), 0);
  for (const std::int64_t i : order) {
    std::int64_t best = -1;
    for (std::int64_t p = 0; p < packs; ++p) {
      if (items[std::size_t(p)] < cap &&
          (best < 0 || load[std::size_t(p)] < load[std::size_t(best)])) {
        best = p;
      }
    }
    pack_of[std::size_t(i)] = best;
    rank[std::size_t(i)] = items[std::size_t(best)]++;
    load[std::size_t(best)] += weight[std::size_t(i)];
  }
}

std::vector<std::int32_t> naive_eplb(const plan::ExpertLoads& loads, const plan::EplbConfig& c) {
  const std::int64_t E = loads.num_experts, P = c.num_replicas;
  const std::int64_t G = c.hierarchical() ? c.num_groups : 1,
                     N = c.hierarchical() ? c.num_nodes : 1;
  const std::int64_t gs = E / G, epn = E / N, spn = P / N, spg = P / c.num_gpus;
  std::vector<std::int32_t> out(std::size_t(loads.num_layers * P));
  std::vector<std::int64_t> pack_of, rank;
  for (std::int64_t l = 0; l < loads.num_layers; ++l) {
    std::vector<float> w(static_cast<std::size_t>(E)), group(static_cast<std::size_t>(G), 0.0F);
    for (std::int64_t e = 0; e < E; ++e) w[std::size_t(e)] = float(loads.at(l, e));
    for (std::int64_t e = 0; e < E; ++e) group[std::size_t(e / gs)] += w[std::size_t(e)];
    naive_packing(group, N, pack_of, rank);
    std::vector<std::int64_t> mlog2log(static_cast<std::size_t>(E));
    for (std::int64_t g = 0; g < G; ++g) {
      for (std::int64_t k = 0; k < gs; ++k) {
        mlog2log[std::size_t((pack_of[std::size_t(g)] * (G / N) + rank[std::size_t(g)]) * gs + k)] =
            g * gs + k;
      }
    }
    for (std::int64_t n = 0; n < N; ++n) {
      std::vector<float> mw(static_cast<std::size_t>(epn));
      for (std::int64_t j = 0; j < epn; ++j)
        mw[std::size_t(j)] = w[std::size_t(mlog2log[std::size_t(n * epn + j)])];
      std::vector<std::int64_t> phy(static_cast<std::size_t>(spn)), cnt(std::size_t(epn), 1);
      std::iota(phy.begin(), phy.begin() + epn, 0);
      for (std::int64_t i = epn; i < spn; ++i) {  // argmax of load / replicas, a full scan
        std::int64_t best = 0;
        for (std::int64_t j = 1; j < epn; ++j) {
          if (mw[std::size_t(j)] / float(cnt[std::size_t(j)]) >
              mw[std::size_t(best)] / float(cnt[std::size_t(best)]))
            best = j;
        }
        phy[std::size_t(i)] = best;
        ++cnt[std::size_t(best)];
      }
      std::vector<float> pw(static_cast<std::size_t>(spn));
      for (std::int64_t i = 0; i < spn; ++i)
        pw[std::size_t(i)] =
            mw[std::size_t(phy[std::size_t(i)])] / float(cnt[std::size_t(phy[std::size_t(i)])]);
      naive_packing(pw, c.num_gpus / N, pack_of, rank);
      for (std::int64_t i = 0; i < spn; ++i) {
        out[std::size_t(l * P + n * spn + pack_of[std::size_t(i)] * spg + rank[std::size_t(i)])] =
            std::int32_t(mlog2log[std::size_t(n * epn + phy[std::size_t(i)])]);
      }
    }
  }
  return out;
}

// ---- Benchmarks; range(0): 0 = hierarchical 32 GPUs, 1 = global 72 GPUs ----

void BM_NaiveReference(benchmark::State& state) {
  const plan::ExpertLoads loads = synthetic_loads(1);
  for (auto _ : state) benchmark::DoNotOptimize(naive_eplb(loads, config_of(state)));
}
BENCHMARK(BM_NaiveReference)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_PlanDeepseek(benchmark::State& state) {
  const plan::ExpertLoads loads = synthetic_loads(1);
  for (auto _ : state) benchmark::DoNotOptimize(plan::plan_deepseek(loads, config_of(state)));
}
BENCHMARK(BM_PlanDeepseek)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

/// range(1): scenarios (1 = in-sample planning of one recording; 5 = leave-one-out size).
void BM_PlanMoestat(benchmark::State& state) {
  std::vector<plan::ExpertLoads> scenarios;
  for (std::int64_t s = 0; s < state.range(1); ++s)
    scenarios.push_back(synthetic_loads(std::uint64_t(s + 1)));
  for (auto _ : state) benchmark::DoNotOptimize(plan::plan_moestat(scenarios, config_of(state)));
}
BENCHMARK(BM_PlanMoestat)->ArgsProduct({{0, 1}, {1, 5}})->Unit(benchmark::kMillisecond);

/// range(0): strategy (frequency, layer-balanced); 64 GPU experts per layer.
void BM_HotExperts(benchmark::State& state) {
  const plan::ExpertLoads loads = synthetic_loads(1);
  const auto strategy = state.range(0) == 0 ? plan::HotExpertStrategy::kFrequency
                                            : plan::HotExpertStrategy::kLayerBalanced;
  const std::int64_t budget = plan::hot_expert_budget_per_layer(loads, 64);
  for (auto _ : state) {
    benchmark::DoNotOptimize(plan::choose_hot_experts(loads, budget, {.strategy = strategy}));
  }
}
BENCHMARK(BM_HotExperts)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_EvaluatePlacement(benchmark::State& state) {
  const plan::ExpertLoads loads = synthetic_loads(1);
  const Placement placement = plan::plan_deepseek(loads, kHierarchical);
  for (auto _ : state) benchmark::DoNotOptimize(plan::evaluate_placement(loads, placement, 32));
}
BENCHMARK(BM_EvaluatePlacement)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace moestat::bench

BENCHMARK_MAIN();
