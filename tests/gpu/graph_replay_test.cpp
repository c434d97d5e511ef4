// A captured CUDA graph of a whole forward pass (58 MoE layers) replayed over a thousand
// times: the device cursor fills successive window slots, the device valid-token count
// follows each replay's batch, and recording switches on and off without recapture. The
// CPU recorder fed the same data is the reference.
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/record/cuda_recorder.hpp>

#include "gpu/gpu_test_support.hpp"

namespace moestat::test {
namespace {

using record::CpuRecorder;
using record::CudaRecorder;

constexpr std::int64_t kMaxTokens = 48;  // the captured (padded) batch size
constexpr std::int64_t kTopK = 8;
constexpr int kReplays = 1200;

struct CapturedPass {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~CapturedPass() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
};

TEST(CudaRecorderGraph, ThousandReplaysEqualCpuRecorder) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  const std::int64_t num_physical = topology.num_physical_experts;
  for (RecordMode mode : {RecordMode::kStat, RecordMode::kDecayed, RecordMode::kPerPass}) {
    SCOPED_TRACE(std::string(record_mode_name(mode)));
    const RecorderOptions options{.mode = mode, .window_size = 64, .decay = 0.97};
    CpuRecorder cpu(topology, options);
    // per_pass: a ring that holds every replay, so the result cannot depend on when the
    // collector thread runs (pass_collector_test covers a ring that wraps).
    CudaRecorder gpu(topology, options, -1,
                     pass_ring_options(kReplays, std::chrono::milliseconds(1)));

    // Per MoE layer a fixed device buffer; even layers int64, odd int32.
    std::vector<std::int64_t> moe_layers;
    for (std::int64_t layer = 0; layer < topology.num_layers; ++layer) {
      if (topology.is_moe(layer)) moe_layers.push_back(layer);
    }
    ASSERT_GE(moe_layers.size(), 58u);
    std::vector<std::unique_ptr<DeviceArray<std::int64_t>>> ids64;
    std::vector<std::unique_ptr<DeviceArray<std::int32_t>>> ids32;
    for (std::size_t i = 0; i < moe_layers.size(); ++i) {
      ids64.push_back(std::make_unique<DeviceArray<std::int64_t>>(std::size_t(kMaxTokens * kTopK)));
      ids32.push_back(std::make_unique<DeviceArray<std::int32_t>>(std::size_t(kMaxTokens * kTopK)));
    }
    DeviceArray<std::int32_t> valid(1);

    cudaStream_t stream;
    MOESTAT_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    gpu.set_stream(stream);
    CapturedPass captured;
    MOESTAT_EXPECT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    gpu.begin_pass(0);
    for (std::size_t i = 0; i < moe_layers.size(); ++i) {
      const bool wide = i % 2 == 0;
      const void* data = wide ? static_cast<void*>(ids64[i]->data()) : ids32[i]->data();
      gpu.record_topk(moe_layers[i],
                      TensorView::contiguous(data, wide ? DType::kInt64 : DType::kInt32,
                                             {kMaxTokens, kTopK}, Device::cuda(0)),
                      TensorView::contiguous(valid.data(), DType::kInt32, {1}, Device::cuda(0)));
    }
    gpu.end_pass();
    MOESTAT_EXPECT_CUDA(cudaStreamEndCapture(stream, &captured.graph));
    MOESTAT_EXPECT_CUDA(cudaGraphInstantiate(&captured.exec, captured.graph, 0));

    std::mt19937_64 rng(42);
    cpu.start();
    gpu.start();
    for (int replay = 0; replay < kReplays; ++replay) {
      if (replay == 300) {  // switched off between replays: the same graph records nothing
        cpu.stop();
        gpu.stop();
      }
      if (replay == 400) {
        cpu.start();
        gpu.start();
      }
      const auto num_valid = std::int32_t(rng() % (kMaxTokens + 1));
      valid.upload({num_valid});
      cpu.begin_pass(0);
      for (std::size_t i = 0; i < moe_layers.size(); ++i) {
        // Padding rows beyond num_valid hold ids that must not be counted.
        const auto ids = random_ids(rng, kMaxTokens, kTopK, num_physical, 0.02, 0.01);
        if (i % 2 == 0) {
          ids64[i]->upload(ids);
        } else {
          ids32[i]->upload(cast_ids<std::int32_t>(ids));
        }
        cpu.record_topk(moe_layers[i],
                        TensorView::contiguous(ids.data(), DType::kInt64, {kMaxTokens, kTopK}),
                        num_valid);
      }
      cpu.end_pass();
      MOESTAT_EXPECT_CUDA(cudaGraphLaunch(captured.exec, stream));
      MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(stream));
      if (replay == 350 && mode != RecordMode::kDecayed) {
        expect_same_window(cpu.snapshot(), gpu.snapshot());
      }
    }
    const Snapshot expected = cpu.snapshot();
    const Snapshot actual = gpu.snapshot();
    EXPECT_EQ(actual.num_passes, kReplays - 400);
    if (mode != RecordMode::kDecayed) {
      EXPECT_EQ(actual.window_size(), mode == RecordMode::kStat ? 64 : kReplays - 400);
      EXPECT_EQ(actual.dropped_passes, 0);
      expect_same_window(expected, actual);
    } else {
      expect_same_decayed(expected, actual);
    }
    MOESTAT_EXPECT_CUDA(cudaStreamDestroy(stream));
  }
}

}  // namespace
}  // namespace moestat::test
