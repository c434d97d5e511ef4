// Per-token traces from the CUDA recorder: with room to spare, every token's ids in the
// trace file equal the CPU recorder's (eager passes and replays of a captured graph); with
// a forced overflow, the drop tally is exact and the rest of the file intact.
#include <filesystem>
#include <moestat/io/trace_file.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/record/cuda_recorder.hpp>

#include "gpu/gpu_test_support.hpp"

namespace moestat::test {
namespace {

using record::CpuRecorder;
using record::CudaOptions;
using record::CudaRecorder;

/// Every token's ids reach the file, written with `reserve_bytes` of reserved file.
void check_every_token_reaches_the_file(std::uint64_t reserve_bytes) {
  const ModelTopology topology = deepseek_like_topology();
  const auto path = trace_path("full");
  constexpr std::int64_t kMaxTokens = 96;
  const RecorderOptions options{.mode = RecordMode::kPerToken, .per_token_capacity = 1 << 16};
  CpuRecorder cpu(topology, options);
  {
    CudaRecorder gpu(topology, options, -1,
                     CudaOptions{.trace_path = path, .trace_reserve_bytes = reserve_bytes});
    cudaStream_t stream;
    MOESTAT_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    gpu.set_stream(stream);
    cpu.start();
    gpu.start();

    // Fixed device buffers, as a captured graph needs: even layers int64, odd int32.
    std::vector<std::unique_ptr<DeviceArray<std::int64_t>>> ids64;
    std::vector<std::unique_ptr<DeviceArray<std::int32_t>>> ids32;
    for (std::int64_t layer = 0; layer < 61; ++layer) {
      ids64.push_back(std::make_unique<DeviceArray<std::int64_t>>(std::size_t(kMaxTokens * 8)));
      ids32.push_back(std::make_unique<DeviceArray<std::int32_t>>(std::size_t(kMaxTokens * 8)));
    }
    DeviceArray<std::int32_t> valid(1);
    auto view = [&](std::int64_t layer) {
      const bool wide = layer % 2 == 0;
      const void* data = wide ? static_cast<void*>(ids64[std::size_t(layer)]->data())
                              : ids32[std::size_t(layer)]->data();
      return TensorView::contiguous(data, wide ? DType::kInt64 : DType::kInt32, {kMaxTokens, 8},
                                    Device::cuda(0));
    };
    const TensorView valid_view =
        TensorView::contiguous(valid.data(), DType::kInt32, {1}, Device::cuda(0));
    std::mt19937_64 rng(21);
    // Fills every layer's buffers with fresh ids and feeds the CPU reference the same pass.
    auto next_pass = [&](std::int64_t pass_id) {
      const auto num_valid = std::int32_t(rng() % (kMaxTokens + 1));
      valid.upload({num_valid});
      cpu.begin_pass(pass_id);
      for (std::int64_t layer = 3; layer < 61; ++layer) {
        const auto ids = random_ids(rng, kMaxTokens, 8, topology.num_physical_experts);
        if (layer % 2 == 0) {
          ids64[std::size_t(layer)]->upload(ids);
        } else {
          ids32[std::size_t(layer)]->upload(cast_ids<std::int32_t>(ids));
        }
        cpu.record_topk(layer, TensorView::contiguous(ids.data(), DType::kInt64, {kMaxTokens, 8}),
                        num_valid);
      }
      cpu.end_pass();
    };
    auto record_pass = [&](std::int64_t pass_id) {
      gpu.begin_pass(pass_id);
      for (std::int64_t layer = 3; layer < 61; ++layer)
        gpu.record_topk(layer, view(layer), valid_view);
      gpu.end_pass();
    };

    for (std::int64_t pass = 0; pass < 20; ++pass) {  // eager
      next_pass(pass);
      record_pass(pass);
      MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(stream));
    }
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    MOESTAT_EXPECT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    record_pass(1000);
    MOESTAT_EXPECT_CUDA(cudaStreamEndCapture(stream, &graph));
    MOESTAT_EXPECT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 200; ++replay) {
      next_pass(1000);
      MOESTAT_EXPECT_CUDA(cudaGraphLaunch(exec, stream));
      MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(stream));
    }
    gpu.drain_trace();
    const Snapshot snapshot = gpu.snapshot();
    EXPECT_EQ(snapshot.dropped_tokens, 0);
    EXPECT_EQ(snapshot.num_passes, 220);
    EXPECT_EQ(snapshot.dropped_ids, cpu.snapshot().dropped_ids);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
  const Snapshot expected = cpu.snapshot();
  std::vector<std::int32_t> ids;
  std::vector<std::int64_t> pass_ids;
  flatten(io::read_trace_file(path), ids, pass_ids);
  EXPECT_GT(expected.num_tokens(), 1000);
  EXPECT_EQ(pass_ids, expected.token_pass_ids);
  EXPECT_EQ(ids, expected.token_physical_ids);
  std::filesystem::remove(path);
}

TEST(CudaRecorderTrace, EveryTokenReachesTheFileEagerlyAndFromGraphs) {
  MOESTAT_REQUIRE_GPU();
  check_every_token_reaches_the_file(0);
}

// A reserve of 4 MiB, about a fifth of the trace: passes land inside it, across its end and
// past it.
TEST(CudaRecorderTrace, EveryTokenReachesAReservedFile) {
  MOESTAT_REQUIRE_GPU();
  check_every_token_reaches_the_file(std::uint64_t(4) << 20);
}

TEST(CudaRecorderTrace, OverflowDropsWholeTokensAndCountsThemExactly) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = ModelTopology::uniform(4, 16, 2);
  const auto path = trace_path("overflow");
  // A ring of 64 tokens and passes of at most 80 staged tokens.
  const RecorderOptions options{.mode = RecordMode::kPerToken, .per_token_capacity = 64};
  CudaRecorder gpu(topology, options, -1,
                   CudaOptions{.trace_path = path, .max_tokens_per_pass = 80});
  gpu.start();
  std::mt19937_64 rng(5);
  std::vector<std::vector<std::int64_t>> passes;
  auto record = [&](std::int64_t tokens) {
    passes.push_back(random_ids(rng, tokens, 2, 16, 0.0, 0.0));
    DeviceArray<std::int64_t> device(passes.back());
    gpu.begin_pass(std::int64_t(passes.size()) - 1);
    for (std::int64_t layer = 0; layer < 4; ++layer) {
      gpu.record_topk(layer, TensorView::contiguous(device.data(), DType::kInt64, {tokens, 2},
                                                    Device::cuda(0)));
    }
    gpu.end_pass();
    MOESTAT_EXPECT_CUDA(cudaDeviceSynchronize());
    gpu.drain_trace();  // the writer frees the ring: each pass starts with an empty ring
  };
  record(100);  // 80 staged, 64 fit: 36 dropped
  EXPECT_EQ(gpu.snapshot().dropped_tokens, 36);
  record(50);  // fits
  record(70);  // 64 fit: 6 dropped
  const Snapshot snapshot = gpu.snapshot();
  EXPECT_EQ(snapshot.dropped_tokens, 42);
  EXPECT_EQ(snapshot.num_passes, 3);

  const io::TraceFile file = io::read_trace_file(path);
  ASSERT_EQ(file.chunks.size(), 3u);
  const std::int64_t kept[] = {64, 50, 64};
  for (std::size_t pass = 0; pass < 3; ++pass) {
    const io::TraceChunk& chunk = file.chunks[pass];
    EXPECT_EQ(chunk.pass_id, std::int64_t(pass));
    ASSERT_EQ(std::int64_t(chunk.ids.size()), kept[pass] * 4 * 2);
    // The kept tokens are the pass's first ones, every layer holding the same ids.
    for (std::int64_t token = 0; token < kept[pass]; ++token) {
      for (std::int64_t layer = 0; layer < 4; ++layer) {
        for (std::int64_t column = 0; column < 2; ++column) {
          ASSERT_EQ(chunk.ids[std::size_t((token * 4 + layer) * 2 + column)],
                    passes[pass][std::size_t(token * 2 + column)]);
        }
      }
    }
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace moestat::test
