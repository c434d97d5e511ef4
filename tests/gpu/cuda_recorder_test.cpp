// The CUDA recorder against the CPU recorder (the reference), eagerly: every size path,
// both id dtypes, strided and misaligned views, host and device valid counts, local counts,
// decayed loads, placement changes and the errors of the CUDA backend.
#include <moestat/error.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/record/cuda_recorder.hpp>

#include "gpu/gpu_test_support.hpp"

namespace moestat::test {
namespace {

using record::CpuRecorder;
using record::CudaRecorder;

enum class Layout { kContiguous, kTransposed, kMisaligned };

/// Host ids laid out as `layout` says, with the matching view strides.
struct LaidOutIds {
  std::vector<std::int64_t> storage;  // element values in memory order (after any offset)
  std::int64_t offset = 0;            // elements before the first id
  std::int64_t row_stride = 0;
  std::int64_t column_stride = 0;
};

LaidOutIds lay_out(const std::vector<std::int64_t>& ids, std::int64_t num_tokens,
                   std::int64_t top_k, Layout layout) {
  LaidOutIds out;
  if (layout == Layout::kTransposed) {
    out.storage.resize(ids.size());
    for (std::int64_t t = 0; t < num_tokens; ++t) {
      for (std::int64_t c = 0; c < top_k; ++c) {
        out.storage[std::size_t(c * num_tokens + t)] = ids[std::size_t(t * top_k + c)];
      }
    }
    out.row_stride = 1;
    out.column_stride = num_tokens;
    return out;
  }
  out.offset = layout == Layout::kMisaligned ? 1 : 0;
  out.storage.assign(std::size_t(out.offset), 0);
  out.storage.insert(out.storage.end(), ids.begin(), ids.end());
  out.row_stride = top_k;
  out.column_stride = 1;
  return out;
}

/// Records the same ids on both recorders, as a dtype T tensor in the given layout.
template <typename T>
void record_both(CpuRecorder& cpu, CudaRecorder& gpu, std::int64_t layer,
                 const std::vector<std::int64_t>& ids, std::int64_t num_tokens, std::int64_t top_k,
                 Layout layout, std::int64_t valid, bool device_count) {
  const LaidOutIds laid = lay_out(ids, num_tokens, top_k, layout);
  const std::vector<T> host = cast_ids<T>(laid.storage);
  DeviceArray<T> device(host);
  const DType dtype = sizeof(T) == 8 ? DType::kInt64 : DType::kInt32;
  const std::int64_t shape[] = {num_tokens, top_k};
  const std::int64_t strides[] = {laid.row_stride, laid.column_stride};
  TensorView host_view(host.data() + laid.offset, dtype, shape, strides);
  TensorView device_view(device.data() + laid.offset, dtype, shape, strides, Device::cuda(0));
  cpu.record_topk(layer, host_view, valid);
  if (device_count) {
    DeviceArray<std::int32_t> count(std::vector<std::int32_t>{std::int32_t(valid)});
    gpu.record_topk(layer, device_view,
                    TensorView::contiguous(count.data(), DType::kInt32, {1}, Device::cuda(0)));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  } else {
    gpu.record_topk(layer, device_view, valid);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
}

TEST(CudaRecorder, EveryPathEqualsCpuRecorder) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  CpuRecorder cpu(topology, {.mode = RecordMode::kStat, .window_size = 1000});
  CudaRecorder gpu(topology, {.mode = RecordMode::kStat, .window_size = 1000});
  cpu.start();
  gpu.start();
  std::mt19937_64 rng(7);
  std::int64_t pass_id = 0;
  // Awkward sizes on both sides of the small/large kernel threshold.
  for (std::int64_t num_tokens : {1, 19, 99, 512, 989, 5000, 32768}) {
    for (Layout layout : {Layout::kContiguous, Layout::kTransposed, Layout::kMisaligned}) {
      for (bool int64_ids : {false, true}) {
        cpu.begin_pass(pass_id);
        gpu.begin_pass(pass_id);
        ++pass_id;
        for (std::int64_t layer : {3, 17, 60}) {
          const auto ids = random_ids(rng, num_tokens, 8, topology.num_physical_experts);
          // Layer 3 cuts the batch with a host count, layer 17 with a device count; layer 60
          // counts every row (the kernels' unchecked path).
          const std::int64_t valid =
              layer == 60 ? num_tokens
                          : std::uniform_int_distribution<std::int64_t>(0, num_tokens)(rng);
          const bool device_count = layer == 17;
          if (int64_ids) {
            record_both<std::int64_t>(cpu, gpu, layer, ids, num_tokens, 8, layout, valid,
                                      device_count);
          } else {
            record_both<std::int32_t>(cpu, gpu, layer, ids, num_tokens, 8, layout, valid,
                                      device_count);
          }
        }
        cpu.end_pass();
        gpu.end_pass();
      }
    }
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const Snapshot expected = cpu.snapshot();
  const Snapshot actual = gpu.snapshot();
  ASSERT_EQ(actual.window_size(), pass_id);
  EXPECT_GT(expected.dropped_ids, 0);
  expect_same_window(expected, actual);
}

TEST(CudaRecorder, WindowWrapsAndReportsOldestFirst) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = ModelTopology::uniform(4, 16, 2);
  CpuRecorder cpu(topology, {.mode = RecordMode::kStat, .window_size = 5});
  CudaRecorder gpu(topology, {.mode = RecordMode::kStat, .window_size = 5});
  cpu.start();
  gpu.start();
  std::mt19937_64 rng(3);
  for (std::int64_t pass = 0; pass < 12; ++pass) {
    cpu.begin_pass(100 + pass);
    gpu.begin_pass(100 + pass);
    const auto ids = random_ids(rng, 7, 2, 16);
    record_both<std::int32_t>(cpu, gpu, pass % 4, ids, 7, 2, Layout::kContiguous, 7, false);
    cpu.end_pass();
    gpu.end_pass();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const Snapshot actual = gpu.snapshot();
  ASSERT_EQ(actual.window_size(), 5);
  EXPECT_EQ(actual.pass_ids.front(), 107);
  expect_same_window(cpu.snapshot(), actual);
}

TEST(CudaRecorder, LocalCountsDropSharedSlotsAndApplyTheRankOffset) {
  MOESTAT_REQUIRE_GPU();
  ModelTopology topology = ModelTopology::uniform(3, 32, 4);
  topology.num_physical_experts = 40;
  topology.ep_size = 4;
  topology.num_shared_expert_slots = 2;
  topology.validate();
  CpuRecorder cpu(topology, {.mode = RecordMode::kStat, .window_size = 10});
  CudaRecorder gpu(topology, {.mode = RecordMode::kStat, .window_size = 10});
  cpu.start();
  gpu.start();
  std::mt19937_64 rng(11);
  cpu.begin_pass(0);
  gpu.begin_pass(0);
  for (std::int64_t rank = 0; rank < 4; ++rank) {
    std::vector<std::int64_t> counts(12);
    for (auto& count : counts) count = std::int64_t(rng() % 50);
    const bool as_int64 = rank % 2 == 0;
    const std::vector<std::int32_t> narrow(counts.begin(), counts.end());
    const TensorView host = as_int64 ? TensorView::contiguous(counts.data(), DType::kInt64, {12})
                                     : TensorView::contiguous(narrow.data(), DType::kInt32, {12});
    cpu.record_local_counts(1, host, rank);
    if (as_int64) {
      DeviceArray<std::int64_t> device(counts);
      gpu.record_local_counts(
          1, TensorView::contiguous(device.data(), DType::kInt64, {12}, Device::cuda(0)), rank);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    } else {
      DeviceArray<std::int32_t> device(narrow);
      gpu.record_local_counts(
          1, TensorView::contiguous(device.data(), DType::kInt32, {12}, Device::cuda(0)), rank);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
  }
  cpu.end_pass();
  gpu.end_pass();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_same_window(cpu.snapshot(), gpu.snapshot());
}

TEST(CudaRecorder, StatApproxTakesDeepEpNormalHostCounts) {
  MOESTAT_REQUIRE_GPU();
  ModelTopology topology = ModelTopology::uniform(5, 32, 8);
  topology.num_physical_experts = 48;
  topology.ep_size = 4;
  topology.num_shared_expert_slots = 1;
  topology.validate();
  const RecorderOptions options{.mode = RecordMode::kStatApprox, .window_size = 3};
  CpuRecorder cpu(topology, options);
  CudaRecorder gpu(topology, options);
  cpu.start();
  gpu.start();
  std::mt19937_64 rng(13);
  for (std::int64_t pass = 0; pass < 5; ++pass) {  // wraps the window of 3
    cpu.begin_pass(pass);
    gpu.begin_pass(pass);
    for (std::int64_t layer : {0, 2, 4}) {
      for (std::int64_t rank = 0; rank < 4; ++rank) {
        std::vector<std::int64_t> counts(13);  // 12 local experts + 1 shared slot
        for (auto& count : counts) count = std::int64_t(rng() % 1000) * 128;  // padded sizes
        const TensorView host = TensorView::contiguous(counts.data(), DType::kInt64, {13});
        cpu.record_local_counts(layer, host, rank);
        gpu.record_local_counts(layer, host, rank);
        counts.assign(13, -1);  // the caller may reuse its list at once
      }
    }
    cpu.end_pass();
    gpu.end_pass();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const Snapshot actual = gpu.snapshot();
  EXPECT_TRUE(actual.approximate);
  EXPECT_EQ(actual.window_size(), 3);
  expect_same_window(cpu.snapshot(), actual);
}

TEST(CudaRecorder, PassesUseThePlacementInForce) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  for (RecordMode mode : {RecordMode::kStat, RecordMode::kDecayed}) {
    CpuRecorder cpu(topology, {.mode = mode, .window_size = 50, .decay = 0.9});
    CudaRecorder gpu(topology, {.mode = mode, .window_size = 50, .decay = 0.9});
    cpu.start();
    gpu.start();
    std::mt19937_64 rng(5);
    for (std::int64_t pass = 0; pass < 9; ++pass) {
      if (pass % 3 == 2) {
        // Rotate which logical expert each slot holds.
        std::vector<std::int32_t> map(static_cast<std::size_t>(61 * 288));
        for (std::size_t i = 0; i < map.size(); ++i) {
          map[i] = std::int32_t((i % 288 + std::size_t(pass)) % 256);
        }
        const Placement placement(61, 288, 256, map, std::uint64_t(pass));
        cpu.set_placement(placement);
        gpu.set_placement(placement);
      }
      cpu.begin_pass(pass);
      gpu.begin_pass(pass);
      const auto ids = random_ids(rng, 300, 8, 288);
      record_both<std::int32_t>(cpu, gpu, 10, ids, 300, 8, Layout::kContiguous, 300, false);
      cpu.end_pass();
      gpu.end_pass();
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    expect_same_recording(mode, cpu.snapshot(), gpu.snapshot());
  }
}

TEST(CudaRecorder, RejectsHostTensorsAndBadOptions) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = ModelTopology::uniform(2, 8, 2);
  EXPECT_THROW(CudaRecorder(topology, {.mode = RecordMode::kPerToken}), Error);
  EXPECT_THROW(CudaRecorder(topology, {.mode = RecordMode::kPerPass}, -1, pass_ring_options(0)),
               Error);
  CudaRecorder gpu(topology, {.mode = RecordMode::kStat, .window_size = 4});
  gpu.start();
  std::vector<std::int32_t> ids(4, 1);
  gpu.begin_pass(0);
  EXPECT_THROW(gpu.record_topk(0, TensorView::contiguous(ids.data(), DType::kInt32, {2, 2})),
               Error);
  gpu.end_pass();
}

TEST(CudaRecorder, StopKeepsDataAndStartClearsIt) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = ModelTopology::uniform(2, 8, 2);
  CudaRecorder gpu(topology, {.mode = RecordMode::kStat, .window_size = 4});
  DeviceArray<std::int32_t> ids(std::vector<std::int32_t>{1, 2, 3, 9});
  const TensorView view =
      TensorView::contiguous(ids.data(), DType::kInt32, {2, 2}, Device::cuda(0));
  auto pass = [&] {
    gpu.begin_pass(0);
    gpu.record_topk(1, view);
    gpu.end_pass();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  };
  pass();  // not recording yet
  EXPECT_EQ(gpu.snapshot().num_passes, 0);
  gpu.start();
  pass();
  pass();
  gpu.stop();
  pass();
  Snapshot stopped = gpu.snapshot();
  EXPECT_EQ(stopped.num_passes, 2);
  EXPECT_EQ(stopped.dropped_ids, 2);  // id 9 is outside [0, 8)
  gpu.start();
  EXPECT_EQ(gpu.snapshot().num_passes, 0);  // cleared before any pass runs
  pass();
  EXPECT_EQ(gpu.snapshot().num_passes, 1);
}

}  // namespace
}  // namespace moestat::test
