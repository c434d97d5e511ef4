// CudaRecorder::pass_count_row: what an engine kernel adds into the row without looking at
// the recording flag (as SGLang's fused dispatch map does) lands in the pass when the pass
// records, next to the hooks' counts; what it adds while no pass records (an unrecorded
// pass, or no pass at all) reaches no pass. The CPU recorder given the same ids through
// record_topk, only inside passes, is the reference.
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/record/cuda_recorder.hpp>

#include "gpu/fused_kernels.hpp"
#include "gpu/gpu_test_support.hpp"
#include "unit/expect_error.hpp"

namespace moestat::test {
namespace {

using record::CpuRecorder;
using record::CudaRecorder;

constexpr std::int64_t kTopK = 8;

/// Routes a random batch of in-range ids through `gpu`'s row of `layer`, and through the
/// CPU recorder's hook when `reference` is given.
void engine_adds(std::mt19937_64& rng, CudaRecorder& gpu, CpuRecorder* reference,
                 std::int64_t layer) {
  const std::int64_t rows = 1 + std::int64_t(rng() % 200);
  const auto ids = random_ids(rng, rows, kTopK, gpu.topology().num_physical_experts, 0.0, 0.0);
  DeviceArray<std::int32_t> device(cast_ids<std::int32_t>(ids));
  launch_row_add(device.data(), rows * kTopK, gpu.pass_count_row(layer), gpu.stream());
  MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(gpu.stream()));
  if (reference != nullptr) {
    reference->record_topk(layer, TensorView::contiguous(ids.data(), DType::kInt64, {rows, kTopK}));
  }
}

/// A hook on both recorders, so the pass holds row adds and hook counts together.
void hook_both(std::mt19937_64& rng, CudaRecorder& gpu, CpuRecorder& cpu, std::int64_t layer) {
  constexpr std::int64_t kRows = 300;
  const auto ids = random_ids(rng, kRows, kTopK, gpu.topology().num_physical_experts);
  DeviceArray<std::int32_t> device(cast_ids<std::int32_t>(ids));
  gpu.record_topk(
      layer, TensorView::contiguous(device.data(), DType::kInt32, {kRows, kTopK}, Device::cuda(0)));
  MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(gpu.stream()));
  cpu.record_topk(layer, TensorView::contiguous(ids.data(), DType::kInt64, {kRows, kTopK}));
}

/// One pass on both recorders: row adds on two layers and a hook on one of them.
void pass_on_both(std::mt19937_64& rng, CudaRecorder& gpu, CpuRecorder& cpu, std::int64_t pass_id) {
  cpu.begin_pass(pass_id);
  gpu.begin_pass(pass_id);
  engine_adds(rng, gpu, &cpu, 3);
  engine_adds(rng, gpu, &cpu, 60);
  hook_both(rng, gpu, cpu, 3);
  cpu.end_pass();
  gpu.end_pass();
}

/// The fields row adds determine (they carry no valid-token count).
void expect_same_counts(const Snapshot& expected, const Snapshot& actual) {
  if (expected.mode == RecordMode::kDecayed) {
    expect_same_decayed(expected, actual);
    return;
  }
  EXPECT_EQ(actual.pass_ids, expected.pass_ids);
  EXPECT_EQ(actual.physical_counts, expected.physical_counts);
  EXPECT_EQ(actual.logical_counts, expected.logical_counts);
  EXPECT_EQ(actual.num_passes, expected.num_passes);
  EXPECT_EQ(actual.dropped_ids, expected.dropped_ids);
}

TEST(CudaPassCountRow, EngineAddsLandInRecordedPassesOnly) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  for (RecordMode mode : {RecordMode::kStat, RecordMode::kPerPass, RecordMode::kDecayed}) {
    SCOPED_TRACE(std::string(record_mode_name(mode)));
    const RecorderOptions options{.mode = mode, .window_size = 16, .decay = 0.9};
    CpuRecorder cpu(topology, options);
    CudaRecorder gpu(topology, options, -1, pass_ring_options(64));
    cudaStream_t stream;
    MOESTAT_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    gpu.set_stream(stream);
    std::mt19937_64 rng(31);

    cpu.start();
    gpu.start();
    pass_on_both(rng, gpu, cpu, 0);
    pass_on_both(rng, gpu, cpu, 1);
    engine_adds(rng, gpu, nullptr, 3);  // no pass open: an eager warm-up forward
    // Control acts at the next pass that begins on the device: let the ones before it end,
    // or a slow device (compute-sanitizer) begins them under the new setting.
    MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(stream));
    cpu.stop();
    gpu.stop();
    // Not recorded: the CPU recorder ignores its hook, the row keeps the adds until the
    // next recorded pass begins.
    pass_on_both(rng, gpu, cpu, 2);
    // A snapshot holds the passes that ended on the device; wait for the last one.
    MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(stream));
    expect_same_counts(cpu.snapshot(), gpu.snapshot());

    engine_adds(rng, gpu, nullptr, 60);
    MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(stream));
    cpu.start();
    gpu.start();
    pass_on_both(rng, gpu, cpu, 3);
    pass_on_both(rng, gpu, cpu, 4);
    MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(stream));
    const Snapshot actual = gpu.snapshot();
    EXPECT_EQ(actual.num_passes, 2);
    expect_same_counts(cpu.snapshot(), actual);
    MOESTAT_EXPECT_CUDA(cudaStreamDestroy(stream));
  }
}

TEST(CudaPassCountRow, IsCopyZeroOfAMoeLayerInAPassMode) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  CudaRecorder gpu(topology, {.mode = RecordMode::kStat, .window_size = 4});
  EXPECT_EQ(gpu.pass_count_row(3), gpu.fused_target(3).layer_counts);
  EXPECT_NE(gpu.pass_count_row(4), gpu.pass_count_row(3));
  EXPECT_MOESTAT_ERROR(gpu.pass_count_row(0), "pass_count_row: layer 0 is a dense layer");
  EXPECT_MOESTAT_ERROR(gpu.pass_count_row(61), "pass_count_row: layer 61 out of range");
  EXPECT_MOESTAT_ERROR(gpu.pass_count_row(-1), "pass_count_row: layer -1 out of range");
  // stat_approx refuses with a bounded window and with an unbounded one (kept by the pass
  // collector, as per_pass is).
  for (std::int64_t window_size : {4, -1}) {
    CudaRecorder approx(topology, {.mode = RecordMode::kStatApprox, .window_size = window_size});
    EXPECT_MOESTAT_ERROR(approx.pass_count_row(3), "pass_count_row: stat_approx mode cannot");
  }
  const auto path = trace_path("count-row");
  {
    CudaRecorder per_token(topology, {.mode = RecordMode::kPerToken}, -1,
                           record::CudaOptions{.trace_path = path});
    EXPECT_MOESTAT_ERROR(per_token.pass_count_row(3), "pass_count_row: per_token mode cannot");
  }
  std::filesystem::remove(path);
  EXPECT_MOESTAT_ERROR(gpu.drain_trace(),
                       "drain_trace: the recorder is in stat mode, not per_token");
}

}  // namespace
}  // namespace moestat::test
