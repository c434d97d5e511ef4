// CPU recording throughput through the public API, with a naive histogram in the same run
// so that ratios never mix machines or builds. Sizes: decode (1..256 tokens) and prefill
// (4096..32768 tokens) batches, 256 or 288 physical experts, top-8, int32 and int64 ids.
//
// Run (Release build):
//   moestat_bench_cpu --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//                     --benchmark_out=bench/results/cpu_record_<date>.json
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <moestat/record/cpu_recorder.hpp>
#include <vector>

#include "skewed_ids.hpp"

namespace moestat::bench {
namespace {

constexpr std::int64_t kTopK = 8;
constexpr std::int64_t kNumLayers = 61;      // DeepSeek-V3: 61 decoder layers,
constexpr std::int64_t kNumDenseLayers = 3;  // the first 3 dense,
constexpr std::int64_t kNumLogical = 256;    // 256 routed experts (+ 32 replicas at P = 288).
constexpr std::int64_t kWindowSize = 1000;   // SGLang's default stat buffer.
constexpr std::int64_t kFirstMoeLayer = kNumDenseLayers;
// Distinct id tensors a whole-pass benchmark cycles through: enough that layers differ,
// few enough that a 32768-token int64 batch set stays at 8 MiB.
constexpr std::int64_t kNumDistinctLayers = 4;

ModelTopology deepseek_like(std::int64_t num_physical) {
  ModelTopology topology;
  topology.num_layers = kNumLayers;
  topology.moe_layers.assign(std::size_t(kNumLayers), true);
  for (std::int64_t layer = 0; layer < kNumDenseLayers; ++layer) {
    topology.moe_layers[std::size_t(layer)] = false;
  }
  topology.num_logical_experts = kNumLogical;
  topology.num_physical_experts = num_physical;
  topology.top_k = kTopK;
  return topology;
}

template <typename Id>
constexpr DType dtype_of() {
  return sizeof(Id) == 4 ? DType::kInt32 : DType::kInt64;
}

template <typename Id>
void set_throughput(benchmark::State& state, std::int64_t ids_per_iteration) {
  const std::int64_t ids = std::int64_t(state.iterations()) * ids_per_iteration;
  state.SetItemsProcessed(ids);  // reported as items_per_second = ids/s
  state.SetBytesProcessed(ids * std::int64_t(sizeof(Id)));
}

/// Fills the stat window so that timed passes overwrite ring rows, as in a long run,
/// instead of growing the window's storage.
void fill_window(record::CpuRecorder& recorder) {
  for (std::int64_t pass = 0; pass < kWindowSize; ++pass) {
    recorder.begin_pass(pass);
    recorder.end_pass();
  }
}

// One record_topk call into an open pass: the per-call hook cost at decode sizes and the
// counting loop's throughput at prefill sizes. Args: tokens, physical experts.
template <typename Id>
void BM_RecordTopk(benchmark::State& state) {
  const std::int64_t num_tokens = state.range(0);
  const std::int64_t num_physical = state.range(1);
  const auto ids = make_skewed_topk_ids<Id>(num_tokens, num_physical, kTopK, kFirstMoeLayer);
  const auto view = TensorView::contiguous(ids.data(), dtype_of<Id>(), {num_tokens, kTopK});
  record::CpuRecorder recorder(deepseek_like(num_physical), {.mode = RecordMode::kStat});
  recorder.start();
  recorder.begin_pass(0);
  for (auto _ : state) {
    recorder.record_topk(kFirstMoeLayer, view);
  }
  recorder.end_pass();
  set_throughput<Id>(state, num_tokens * kTopK);
}

// The baseline every ratio refers to: the plainest correct loop over the same ids.
template <typename Id>
void BM_NaiveHistogram(benchmark::State& state) {
  const std::int64_t num_tokens = state.range(0);
  const std::int64_t num_physical = state.range(1);
  const auto ids = make_skewed_topk_ids<Id>(num_tokens, num_physical, kTopK, kFirstMoeLayer);
  auto counts = std::vector<std::int64_t>(std::size_t(num_physical), 0);
  for (auto _ : state) {
    for (const Id id : ids) {
      if (id >= 0 && id < num_physical) ++counts[std::size_t(id)];
    }
    benchmark::DoNotOptimize(counts.data());
    benchmark::ClobberMemory();
  }
  set_throughput<Id>(state, num_tokens * kTopK);
}

// A whole forward pass: begin_pass, one record_topk per MoE layer (58), end_pass into a
// full stat window of 1000 passes. Args: tokens, physical experts.
template <typename Id>
void BM_RecordPass(benchmark::State& state) {
  const std::int64_t num_tokens = state.range(0);
  const std::int64_t num_physical = state.range(1);
  std::array<std::vector<Id>, kNumDistinctLayers> ids;
  std::vector<TensorView> views;
  for (std::int64_t i = 0; i < kNumDistinctLayers; ++i) {
    ids[std::size_t(i)] =
        make_skewed_topk_ids<Id>(num_tokens, num_physical, kTopK, kFirstMoeLayer + i);
    views.push_back(
        TensorView::contiguous(ids[std::size_t(i)].data(), dtype_of<Id>(), {num_tokens, kTopK}));
  }
  record::CpuRecorder recorder(deepseek_like(num_physical),
                               {.mode = RecordMode::kStat, .window_size = kWindowSize});
  recorder.start();
  fill_window(recorder);
  std::int64_t pass = kWindowSize;
  for (auto _ : state) {
    recorder.begin_pass(pass++);
    for (std::int64_t layer = kFirstMoeLayer; layer < kNumLayers; ++layer) {
      recorder.record_topk(layer, views[std::size_t(layer % kNumDistinctLayers)]);
    }
    recorder.end_pass();
  }
  set_throughput<Id>(state, num_tokens * kTopK * (kNumLayers - kNumDenseLayers));
}

// begin_pass + end_pass with nothing recorded: what closing a pass costs in stat mode
// (committing [L, P] counts into the window ring under the control mutex). Arg: physical
// experts.
void BM_EndPassStat(benchmark::State& state) {
  record::CpuRecorder recorder(deepseek_like(state.range(0)),
                               {.mode = RecordMode::kStat, .window_size = kWindowSize});
  recorder.start();
  fill_window(recorder);
  std::int64_t pass = kWindowSize;
  for (auto _ : state) {
    recorder.begin_pass(pass++);
    recorder.end_pass();
  }
  state.SetBytesProcessed(std::int64_t(state.iterations()) * kNumLayers * state.range(0) *
                          std::int64_t(sizeof(std::int64_t)));
}

// A fresh recorder's first kWindowSize passes (begin_pass + end_pass, nothing recorded): the
// window filling, which a long run does once and a short one (a prompt file, a benchmark)
// throughout. Counters: the time per pass and the slowest pass, since growing storage shows
// as stalls of single passes. Arg: physical experts.
void BM_FillWindow(benchmark::State& state) {
  double total_us = 0;
  double slowest_us = 0;
  for (auto _ : state) {
    record::CpuRecorder recorder(deepseek_like(state.range(0)),
                                 {.mode = RecordMode::kStat, .window_size = kWindowSize});
    recorder.start();
    for (std::int64_t pass = 0; pass < kWindowSize; ++pass) {
      const auto start = std::chrono::steady_clock::now();
      recorder.begin_pass(pass);
      recorder.end_pass();
      const std::chrono::duration<double, std::micro> took =
          std::chrono::steady_clock::now() - start;
      total_us += took.count();
      slowest_us = std::max(slowest_us, took.count());
    }
  }
  // Wall time, as a stalled forward pass is felt.
  state.counters["us_per_pass"] = total_us / double(state.iterations() * kWindowSize);
  state.counters["slowest_pass_us"] = slowest_us;
}

const std::vector<std::int64_t> kTokenSizes = {1, 16, 64, 256, 4096, 8192, 32768};
const std::vector<std::int64_t> kExpertSizes = {256, 288};

void token_expert_args(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"tokens", "experts"})->ArgsProduct({kTokenSizes, kExpertSizes});
}

BENCHMARK_TEMPLATE(BM_RecordTopk, std::int32_t)->Apply(token_expert_args);
BENCHMARK_TEMPLATE(BM_RecordTopk, std::int64_t)->Apply(token_expert_args);
BENCHMARK_TEMPLATE(BM_NaiveHistogram, std::int32_t)->Apply(token_expert_args);
BENCHMARK_TEMPLATE(BM_NaiveHistogram, std::int64_t)->Apply(token_expert_args);
BENCHMARK_TEMPLATE(BM_RecordPass, std::int32_t)->Apply(token_expert_args);
BENCHMARK_TEMPLATE(BM_RecordPass, std::int64_t)->Apply(token_expert_args);
BENCHMARK(BM_EndPassStat)->ArgName("experts")->Arg(256)->Arg(288);
BENCHMARK(BM_FillWindow)->ArgName("experts")->Arg(256)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace moestat::bench

BENCHMARK_MAIN();
