// Control from another thread while graphs replay: every snapshot holds whole passes only.
// Each replay records the same ids, so every whole pass has one known signature and a torn
// pass (some layers in, some out) cannot match it.
#include <atomic>
#include <chrono>
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/record/cuda_recorder.hpp>
#include <thread>

#include "gpu/gpu_test_support.hpp"

namespace moestat::test {
namespace {

using record::CpuRecorder;
using record::CudaRecorder;

TEST(CudaRecorderControl, SnapshotsWhileReplayingHoldOnlyWholePasses) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  const RecorderOptions options{.mode = RecordMode::kStat, .window_size = 32};
  CudaRecorder gpu(topology, options);
  CpuRecorder reference(topology, options);

  constexpr std::int64_t kTokens = 256;
  std::mt19937_64 rng(9);
  const auto ids = random_ids(rng, kTokens, 8, topology.num_physical_experts);
  DeviceArray<std::int64_t> device_ids(ids);
  const TensorView device_view =
      TensorView::contiguous(device_ids.data(), DType::kInt64, {kTokens, 8}, Device::cuda(0));
  const TensorView host_view = TensorView::contiguous(ids.data(), DType::kInt64, {kTokens, 8});

  // The signature of one whole pass, from the CPU recorder.
  reference.start();
  reference.begin_pass(0);
  for (std::int64_t layer = 3; layer < 61; ++layer) reference.record_topk(layer, host_view);
  reference.end_pass();
  const Snapshot one_pass = reference.snapshot();
  const std::vector<std::int64_t>& signature = one_pass.physical_counts;

  cudaStream_t stream;
  MOESTAT_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  gpu.set_stream(stream);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MOESTAT_EXPECT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  gpu.begin_pass(7);
  for (std::int64_t layer = 3; layer < 61; ++layer) gpu.record_topk(layer, device_view);
  gpu.end_pass();
  MOESTAT_EXPECT_CUDA(cudaStreamEndCapture(stream, &graph));
  MOESTAT_EXPECT_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  std::atomic<bool> done{false};
  std::thread engine([&] {
    for (int replay = 0; replay < 4000; ++replay) {
      if (cudaGraphLaunch(exec, stream) != cudaSuccess) break;
      if (replay % 16 == 15) cudaStreamSynchronize(stream);
    }
    cudaStreamSynchronize(stream);
    done = true;
  });

  int snapshots = 0;
  int non_empty = 0;
  std::int64_t last_passes = 0;
  while (!done) {
    gpu.start();
    last_passes = 0;
    for (int i = 0; i < 20 && !done; ++i) {
      const Snapshot snapshot = gpu.snapshot();
      ++snapshots;
      const std::int64_t rows = snapshot.window_size();
      ASSERT_LE(rows, 32);
      ASSERT_GE(snapshot.num_passes, last_passes);  // passes since start never go backwards
      last_passes = snapshot.num_passes;
      ASSERT_EQ(snapshot.dropped_ids, snapshot.num_passes * one_pass.dropped_ids);
      const std::size_t pass_size = signature.size();
      for (std::int64_t row = 0; row < rows; ++row) {
        const std::vector<std::int64_t> counts(
            snapshot.physical_counts.begin() + row * std::int64_t(pass_size),
            snapshot.physical_counts.begin() + (row + 1) * std::int64_t(pass_size));
        ASSERT_EQ(counts, signature) << "snapshot " << snapshots << " row " << row;
        ASSERT_EQ(snapshot.pass_ids[std::size_t(row)], 7);
      }
      non_empty += rows > 0;
    }
    gpu.stop();
    const Snapshot stopped = gpu.snapshot();
    ASSERT_GE(stopped.num_passes, last_passes);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  engine.join();
  EXPECT_GT(snapshots, 10);
  EXPECT_GT(non_empty, 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace moestat::test
