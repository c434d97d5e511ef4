// online::LiveMetrics on the CUDA recorder: updates read its snapshots while passes are
// recorded on a stream, and every metric equals LiveMetrics of the CPU recorder fed the same
// ids (the reference; tests/online/live_metrics_test.cpp checks that one against a naive
// recomputation). Updates between passes see the passes the stream has run.
#include <moestat/online/live_metrics.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/record/cuda_recorder.hpp>

#include "gpu/gpu_test_support.hpp"

namespace moestat::testing {
namespace {

using online::LiveMetrics;
using online::MetricValues;

void expect_same_metrics(const MetricValues& expected, const MetricValues& actual) {
  EXPECT_EQ(actual.passes_recorded, expected.passes_recorded);
  EXPECT_EQ(actual.passes_observed, expected.passes_observed);
  EXPECT_EQ(actual.passes_unobserved, expected.passes_unobserved);
  EXPECT_EQ(actual.dropped_ids, expected.dropped_ids);
  EXPECT_EQ(actual.last_pass_id, expected.last_pass_id);
  EXPECT_EQ(actual.last_pass_gpu_loads, expected.last_pass_gpu_loads);
  EXPECT_EQ(actual.gpu_assignments_total, expected.gpu_assignments_total);
  EXPECT_EQ(actual.last_pass_balancedness, expected.last_pass_balancedness);
  ASSERT_EQ(actual.balancedness_means.size(), expected.balancedness_means.size());
  for (std::size_t i = 0; i < expected.balancedness_means.size(); ++i) {
    EXPECT_EQ(actual.balancedness_means[i].num_passes, expected.balancedness_means[i].num_passes);
    EXPECT_EQ(actual.balancedness_means[i].value, expected.balancedness_means[i].value);
  }
  EXPECT_EQ(actual.uncovered_passes, expected.uncovered_passes);
  EXPECT_EQ(actual.hottest_experts, expected.hottest_experts);
}

TEST(CudaLiveMetrics, EqualThoseOfTheCpuRecorder) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  // stat: a window of 16, so some passes leave it between updates; per_pass: the collector's
  // ring holds every pass, so no pass is dropped whenever its thread runs.
  for (RecordMode mode : {RecordMode::kStat, RecordMode::kPerPass}) {
    SCOPED_TRACE(std::string(record_mode_name(mode)));
    const RecorderOptions options{.mode = mode, .window_size = 16};
    record::CpuRecorder cpu(topology, options);
    record::CudaRecorder gpu(topology, options, -1,
                             pass_ring_options(64, std::chrono::milliseconds(1)));
    cudaStream_t stream;
    MOESTAT_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    gpu.set_stream(stream);
    LiveMetrics cpu_metrics(cpu, {.num_hottest_experts = 20});
    LiveMetrics gpu_metrics(gpu, {.num_hottest_experts = 20});
    cpu.start();
    gpu.start();

    std::mt19937_64 rng(3);
    constexpr std::int64_t kTopK = 8;
    for (std::int64_t pass = 0; pass < 37; ++pass) {
      const std::int64_t tokens = 1 + (pass * 13) % 29;  // awkward sizes, one token included
      std::vector<std::unique_ptr<DeviceArray<std::int64_t>>> device_ids;
      cpu.begin_pass(pass);
      gpu.begin_pass(pass);
      for (std::int64_t layer = 0; layer < topology.num_layers; ++layer) {
        // Layer 7 is skipped in every fifth pass: the coverage check must name it on both.
        if (!topology.is_moe(layer) || (layer == 7 && pass % 5 == 0)) continue;
        const std::vector<std::int64_t> ids =
            random_ids(rng, tokens, kTopK, topology.num_physical_experts);
        device_ids.push_back(std::make_unique<DeviceArray<std::int64_t>>(ids));
        cpu.record_topk(layer, TensorView::contiguous(ids.data(), DType::kInt64, {tokens, kTopK}));
        gpu.record_topk(layer, TensorView::contiguous(device_ids.back()->data(), DType::kInt64,
                                                      {tokens, kTopK}, Device::cuda(0)));
      }
      cpu.end_pass();
      gpu.end_pass();
      MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(stream));  // the ids' buffers go out of scope
      // Updates after one pass, after more passes than the window of 16 holds, after none.
      if (pass == 3 || pass == 30 || pass == 31 || pass == 36) {
        SCOPED_TRACE(pass);
        expect_same_metrics(cpu_metrics.update(), gpu_metrics.update());
      }
    }
    const MetricValues values = gpu_metrics.update();
    EXPECT_EQ(values.uncovered_layers(), std::vector<std::string>{"7"});
    EXPECT_EQ(values.passes_dropped, 0);
    EXPECT_EQ(values.passes_unobserved > 0, mode == RecordMode::kStat);
    gpu.set_stream(nullptr);
    cudaStreamDestroy(stream);
  }
}

}  // namespace
}  // namespace moestat::testing
