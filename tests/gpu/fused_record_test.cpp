// Counting from inside an engine kernel (moestat/record/cuda_fused.cuh) equals the
// record_topk hook of the CPU recorder: eagerly, over many blocks, with -1 padding and
// out-of-range ids, and from a captured graph replayed with recording switched on and off.
#include <moestat/error.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/record/cuda_recorder.hpp>

#include "gpu/fused_kernels.hpp"
#include "gpu/gpu_test_support.hpp"

namespace moestat::test {
namespace {

using record::CpuRecorder;
using record::CudaRecorder;

constexpr std::int64_t kTopK = 8;

TEST(CudaFusedRecord, EngineKernelCountsEqualTheHook) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  for (RecordMode mode : {RecordMode::kStat, RecordMode::kPerPass, RecordMode::kDecayed}) {
    SCOPED_TRACE(std::string(record_mode_name(mode)));
    const RecorderOptions options{.mode = mode, .window_size = 16, .decay = 0.9};
    CpuRecorder cpu(topology, options);
    CudaRecorder gpu(topology, options);
    cpu.start();
    gpu.start();
    std::mt19937_64 rng(23);
    for (std::int64_t pass = 0; pass < 6; ++pass) {
      cpu.begin_pass(pass);
      gpu.begin_pass(pass);
      for (std::int64_t layer : {3, 30, 60}) {
        const std::int64_t rows = pass == 5 ? 4096 : 1 + std::int64_t(rng() % 300);
        const auto ids = random_ids(rng, rows, kTopK, 288, 0.02, 0.01);
        const auto valid = std::int32_t(rng() % (rows + 1));
        cpu.record_topk(layer, TensorView::contiguous(ids.data(), DType::kInt64, {rows, kTopK}),
                        valid);
        DeviceArray<std::int32_t> device_ids(cast_ids<std::int32_t>(ids));
        DeviceArray<std::int32_t> device_valid(std::vector<std::int32_t>{valid});
        launch_fused_count(device_ids.data(), rows, kTopK, device_valid.data(),
                           gpu.fused_target(layer), gpu.stream());
        MOESTAT_EXPECT_CUDA(cudaDeviceSynchronize());
      }
      cpu.end_pass();
      gpu.end_pass();
    }
    MOESTAT_EXPECT_CUDA(cudaDeviceSynchronize());
    expect_same_recording(mode, cpu.snapshot(), gpu.snapshot());
  }
}

TEST(CudaFusedRecord, CapturedOnceServesRecordingOnAndOff) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  const RecorderOptions options{.mode = RecordMode::kStat, .window_size = 100};
  CpuRecorder cpu(topology, options);
  CudaRecorder gpu(topology, options);
  constexpr std::int64_t kRows = 64;
  std::vector<std::int64_t> moe_layers;
  for (std::int64_t layer = 0; layer < topology.num_layers; ++layer) {
    if (topology.is_moe(layer)) moe_layers.push_back(layer);
  }
  std::vector<std::unique_ptr<DeviceArray<std::int32_t>>> ids;
  for (std::size_t i = 0; i < moe_layers.size(); ++i) {
    ids.push_back(std::make_unique<DeviceArray<std::int32_t>>(std::size_t(kRows * kTopK)));
  }
  DeviceArray<std::int32_t> valid(1);
  cudaStream_t stream;
  MOESTAT_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  gpu.set_stream(stream);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MOESTAT_EXPECT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  gpu.begin_pass(0);
  for (std::size_t i = 0; i < moe_layers.size(); ++i) {
    launch_fused_count(ids[i]->data(), kRows, kTopK, valid.data(), gpu.fused_target(moe_layers[i]),
                       stream);
  }
  gpu.end_pass();
  MOESTAT_EXPECT_CUDA(cudaStreamEndCapture(stream, &graph));
  MOESTAT_EXPECT_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  std::mt19937_64 rng(29);
  cpu.start();
  gpu.start();
  for (int replay = 0; replay < 200; ++replay) {
    if (replay == 50) {
      cpu.stop();
      gpu.stop();
    }
    if (replay == 80) {
      cpu.start();
      gpu.start();
    }
    const auto num_valid = std::int32_t(rng() % (kRows + 1));
    valid.upload({num_valid});
    cpu.begin_pass(0);
    for (std::size_t i = 0; i < moe_layers.size(); ++i) {
      const auto layer_ids = random_ids(rng, kRows, kTopK, 288, 0.02, 0.01);
      ids[i]->upload(cast_ids<std::int32_t>(layer_ids));
      cpu.record_topk(moe_layers[i],
                      TensorView::contiguous(layer_ids.data(), DType::kInt64, {kRows, kTopK}),
                      num_valid);
    }
    cpu.end_pass();
    MOESTAT_EXPECT_CUDA(cudaGraphLaunch(exec, stream));
    MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(stream));
  }
  const Snapshot actual = gpu.snapshot();
  EXPECT_EQ(actual.num_passes, 120);
  expect_same_window(cpu.snapshot(), actual);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  MOESTAT_EXPECT_CUDA(cudaStreamDestroy(stream));
}

TEST(CudaFusedRecord, RefusesDenseLayersAndModesWithoutPassCounts) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  CudaRecorder gpu(topology, {.mode = RecordMode::kStat, .window_size = 4});
  EXPECT_THROW(gpu.fused_target(0), Error);   // dense
  EXPECT_THROW(gpu.fused_target(61), Error);  // out of range
  EXPECT_THROW(gpu.fused_target(-1), Error);
  EXPECT_NO_THROW(gpu.fused_target(3));
  CudaRecorder approx(topology, {.mode = RecordMode::kStatApprox, .window_size = 4});
  EXPECT_THROW(approx.fused_target(3), Error);
}

}  // namespace
}  // namespace moestat::test
