// CudaRecorder::abort_pass: a pass aborted after its hooks counted (into every copy of the
// pass, at a size where many blocks add) or staged its tokens leaves no trace; the CPU
// recorder fed only the other passes is the reference.
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/record/cuda_recorder.hpp>

#include "gpu/gpu_test_support.hpp"

namespace moestat::test {
namespace {

using record::CpuRecorder;
using record::CudaOptions;
using record::CudaRecorder;

constexpr std::int64_t kTopK = 8;

void pass_on(std::mt19937_64& rng, std::int64_t pass_id, CudaRecorder& gpu, CpuRecorder* cpu,
             bool abort) {
  const ModelTopology& topology = gpu.topology();
  // 4000 rows: 32000 ids, block histograms over dozens of blocks and so every pass copy.
  const std::int64_t rows = pass_id == 1 ? 4000 : 50;
  const auto ids = random_ids(rng, rows, kTopK, topology.num_physical_experts);
  DeviceArray<std::int64_t> device(ids);
  const TensorView view =
      TensorView::contiguous(device.data(), DType::kInt64, {rows, kTopK}, Device::cuda(0));
  const TensorView host = TensorView::contiguous(ids.data(), DType::kInt64, {rows, kTopK});
  gpu.begin_pass(pass_id);
  if (cpu != nullptr) cpu->begin_pass(pass_id);
  for (std::int64_t layer = 3; layer < topology.num_layers; layer += 5) {
    gpu.record_topk(layer, view);
    if (cpu != nullptr) cpu->record_topk(layer, host);
  }
  if (abort) {
    gpu.abort_pass();
  } else {
    gpu.end_pass();
    if (cpu != nullptr) cpu->end_pass();
  }
  MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(gpu.stream()));
}

TEST(CudaAbortPass, LeavesNoTrace) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  for (RecordMode mode : {RecordMode::kStat, RecordMode::kPerPass, RecordMode::kDecayed}) {
    SCOPED_TRACE(std::string(record_mode_name(mode)));
    const RecorderOptions options{.mode = mode, .window_size = 8, .decay = 0.5};
    CpuRecorder cpu(topology, options);
    CudaRecorder gpu(topology, options, -1, pass_ring_options(16));
    cpu.start();
    gpu.start();
    std::mt19937_64 rng(9);
    pass_on(rng, 0, gpu, &cpu, false);
    pass_on(rng, 1, gpu, nullptr, true);
    pass_on(rng, 2, gpu, &cpu, false);
    expect_same_recording(mode, cpu.snapshot(), gpu.snapshot());
  }
}

// per_token mode: the aborted pass's staged ids never reach the trace file, and the next pass
// stages the same layers again.
TEST(CudaAbortPass, LeavesNoTokensInTheTrace) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  const auto path = trace_path("abort");
  const RecorderOptions options{.mode = RecordMode::kPerToken, .per_token_capacity = 1 << 14};
  CpuRecorder cpu(topology, options);
  {
    CudaRecorder gpu(topology, options, -1, CudaOptions{.trace_path = path});
    cpu.start();
    gpu.start();
    std::mt19937_64 rng(9);
    pass_on(rng, 0, gpu, &cpu, false);
    pass_on(rng, 1, gpu, nullptr, true);
    pass_on(rng, 2, gpu, &cpu, false);
    gpu.drain_trace();
    EXPECT_EQ(gpu.snapshot().num_passes, 2);
  }
  expect_trace_holds(path, cpu.snapshot());
}

}  // namespace
}  // namespace moestat::test
