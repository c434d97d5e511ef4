// The cost of a LiveMetrics update at DeepSeek-V3 shape (61 layers, 288 slots, top-8, a stat
// window of 1000 passes) on the CPU recorder, next to what an update read before it read only
// the new passes: the recorder's whole snapshot. Same run, so the ratio never mixes machines.
// The recorder's lock is held for the read (passes_since or snapshot), so the read is also
// how long an end_pass that comes meanwhile can wait.
//
// Run (Release build):
//   moestat_bench_live --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <moestat/online/live_metrics.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <vector>

#include "skewed_ids.hpp"

namespace moestat::bench {
namespace {

constexpr std::int64_t kNumLayers = 61, kNumDenseLayers = 3, kNumLogical = 256;
constexpr std::int64_t kNumPhysical = 288, kTopK = 8, kWindowSize = 1000;
constexpr std::int64_t kTokensPerPass = 64;  // a decode batch

/// A recorder whose window is full of skewed passes, as after a long run.
class FullRecorder {
 public:
  FullRecorder() : recorder_(topology(), {.mode = RecordMode::kStat, .window_size = kWindowSize}) {
    for (std::int64_t layer = kNumDenseLayers; layer < kNumLayers; ++layer) {
      ids_.push_back(
          make_skewed_topk_ids<std::int32_t>(kTokensPerPass, kNumPhysical, kTopK, layer));
    }
    recorder_.start();
    run_passes(kWindowSize);
  }

  record::CpuRecorder& recorder() { return recorder_; }

  void run_passes(std::int64_t count) {
    for (std::int64_t i = 0; i < count; ++i) {
      recorder_.begin_pass(next_pass_++);
      for (std::int64_t layer = kNumDenseLayers; layer < kNumLayers; ++layer) {
        recorder_.record_topk(
            layer, TensorView::contiguous(ids_[std::size_t(layer - kNumDenseLayers)].data(),
                                          DType::kInt32, {kTokensPerPass, kTopK}));
      }
      recorder_.end_pass();
    }
  }

 private:
  static ModelTopology topology() {
    ModelTopology topology = ModelTopology::uniform(kNumLayers, kNumLogical, kTopK);
    for (std::int64_t layer = 0; layer < kNumDenseLayers; ++layer)
      topology.moe_layers[std::size_t(layer)] = false;
    topology.num_physical_experts = kNumPhysical;
    topology.ep_size = 8;
    return topology;
  }

  record::CpuRecorder recorder_;
  std::vector<std::vector<std::int32_t>> ids_;
  std::int64_t next_pass_ = 0;
};

FullRecorder& full_recorder() {
  static FullRecorder recorder;
  return recorder;
}

/// What each update read before it read only the new passes.
void BM_Snapshot(benchmark::State& state) {
  record::CpuRecorder& recorder = full_recorder().recorder();
  for (auto _ : state) benchmark::DoNotOptimize(recorder.snapshot());
}
BENCHMARK(BM_Snapshot)->Unit(benchmark::kMillisecond);

/// The read an update makes now, `state.range(0)` passes after the previous one.
void BM_PassesSince(benchmark::State& state) {
  FullRecorder& full = full_recorder();
  PassesSince last = full.recorder().passes_since(0, 0);
  for (auto _ : state) {
    state.PauseTiming();
    full.run_passes(state.range(0));
    state.ResumeTiming();
    last = full.recorder().passes_since(last.generation, last.next_arrival());
    benchmark::DoNotOptimize(last);
  }
}
BENCHMARK(BM_PassesSince)->Arg(1)->Arg(10)->Arg(100)->Unit(benchmark::kMillisecond);

/// A whole update, `state.range(0)` passes after the previous one.
void BM_Update(benchmark::State& state) {
  FullRecorder& full = full_recorder();
  online::LiveMetrics metrics(full.recorder());
  metrics.update();
  for (auto _ : state) {
    state.PauseTiming();
    full.run_passes(state.range(0));
    state.ResumeTiming();
    benchmark::DoNotOptimize(metrics.update());
  }
}
BENCHMARK(BM_Update)->Arg(1)->Arg(10)->Arg(100)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace moestat::bench

BENCHMARK_MAIN();
