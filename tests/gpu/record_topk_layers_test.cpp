// CudaRecorder::record_topk_layers: many layers counted in one launch equal the CPU recorder
// fed the same ids layer by layer with record_topk, for int32 and int64 ids mixed in one
// batch, strided matrices, padding and out-of-range ids, decode and prefill sizes, every way
// of giving the valid-token count, and more layers than one launch takes; in per_token mode
// the trace holds the CPU recorder's tokens. Captured in a CUDA graph, a pass of 58 layers adds
// one kernel node.
#include <functional>
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/record/cuda_recorder.hpp>

#include "gpu/gpu_test_support.hpp"
#include "unit/expect_error.hpp"

namespace moestat::test {
namespace {

using record::CpuRecorder;
using record::CudaOptions;
using record::CudaRecorder;

constexpr std::int64_t kTopK = 8;

/// One layer's ids on the host (the reference's input) and on the device (in int32 or int64,
/// and transposed in memory when `strided`: element (t, c) at c * rows + t).
struct LayerInput {
  std::int64_t layer;
  std::vector<std::int64_t> host;
  std::unique_ptr<DeviceArray<std::int32_t>> ids32;
  std::unique_ptr<DeviceArray<std::int64_t>> ids64;
  bool strided;
  std::int64_t rows;

  TensorView device_view(int device) const {
    const DType dtype = ids64 ? DType::kInt64 : DType::kInt32;
    const void* data =
        ids64 ? static_cast<const void*>(ids64->data()) : static_cast<const void*>(ids32->data());
    if (!strided) return TensorView::contiguous(data, dtype, {rows, kTopK}, Device::cuda(device));
    const std::int64_t shape[] = {rows, kTopK};
    const std::int64_t strides[] = {1, rows};
    return TensorView(data, dtype, shape, strides, Device::cuda(device));
  }
};

LayerInput make_layer(std::mt19937_64& rng, std::int64_t layer, std::int64_t rows,
                      std::int64_t num_physical) {
  LayerInput input{
      layer, random_ids(rng, rows, kTopK, num_physical), nullptr, nullptr, rng() % 5 == 0, rows};
  std::vector<std::int64_t> stored = input.host;
  if (input.strided) {
    for (std::int64_t t = 0; t < rows; ++t)
      for (std::int64_t c = 0; c < kTopK; ++c)
        stored[std::size_t(c * rows + t)] = input.host[std::size_t(t * kTopK + c)];
  }
  if (rng() % 2 == 0) {
    input.ids64 = std::make_unique<DeviceArray<std::int64_t>>(stored);
  } else {
    input.ids32 = std::make_unique<DeviceArray<std::int32_t>>(cast_ids<std::int32_t>(stored));
  }
  return input;
}

std::vector<std::int64_t> moe_layers_of(const ModelTopology& topology) {
  std::vector<std::int64_t> layers;
  for (std::int64_t layer = 0; layer < topology.num_layers; ++layer) {
    if (topology.is_moe(layer)) layers.push_back(layer);
  }
  return layers;
}

/// How a pass gives its valid-token count.
enum class Valid { kAll, kHostCount, kDeviceCount };

/// One pass of `rows` tokens per layer on both recorders: the CPU recorder layer by layer,
/// the CUDA recorder in one record_topk_layers call.
void pass_on_both(std::mt19937_64& rng, CpuRecorder& cpu, CudaRecorder& gpu, std::int64_t pass_id,
                  std::int64_t rows, Valid valid) {
  const ModelTopology& topology = gpu.topology();
  std::vector<LayerInput> inputs;
  for (std::int64_t layer : moe_layers_of(topology)) {
    inputs.push_back(make_layer(rng, layer, rows, topology.num_physical_experts));
  }
  std::vector<Recorder::LayerTopk> layers;
  for (const LayerInput& input : inputs) layers.push_back({input.layer, input.device_view(0)});
  const std::int64_t valid_rows = std::int64_t(rng() % std::uint64_t(rows + 1));
  DeviceArray<std::int64_t> device_count(std::vector<std::int64_t>{valid_rows});

  cpu.begin_pass(pass_id);
  gpu.begin_pass(pass_id);
  for (const LayerInput& input : inputs) {
    const TensorView host = TensorView::contiguous(input.host.data(), DType::kInt64, {rows, kTopK});
    cpu.record_topk(input.layer, host, valid == Valid::kAll ? Recorder::kAllTokens : valid_rows);
  }
  switch (valid) {
    case Valid::kAll:
      gpu.record_topk_layers(layers);
      break;
    case Valid::kHostCount:
      gpu.record_topk_layers(layers, valid_rows);
      break;
    case Valid::kDeviceCount:
      gpu.record_topk_layers(
          layers, TensorView::contiguous(device_count.data(), DType::kInt64, {1}, Device::cuda(0)));
      break;
  }
  cpu.end_pass();
  gpu.end_pass();
  // The device arrays go out of scope: the pass must have run.
  MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(gpu.stream()));
}

/// One pass of each size and form of valid count on both recorders: decode sizes (direct
/// atomics) and a prefill size (block histograms). Returns how many passes ran.
std::int64_t passes_of_every_size(std::mt19937_64& rng, CpuRecorder& cpu, CudaRecorder& gpu) {
  std::int64_t pass_id = 0;
  for (std::int64_t rows : {1, 3, 64, 700}) {
    for (Valid valid : {Valid::kAll, Valid::kHostCount, Valid::kDeviceCount}) {
      pass_on_both(rng, cpu, gpu, pass_id++, rows, valid);
    }
  }
  return pass_id;
}

TEST(CudaRecordTopkLayers, EqualsRecordTopkLayerByLayer) {
  MOESTAT_REQUIRE_GPU();
  // 130 MoE layers: three launches of at most 64 layers, each split again where the id type
  // changes.
  ModelTopology many_layers = ModelTopology::uniform(131, 64, kTopK);
  many_layers.moe_layers[0] = false;
  for (const ModelTopology& topology : {deepseek_like_topology(), many_layers}) {
    for (RecordMode mode : {RecordMode::kStat, RecordMode::kPerPass, RecordMode::kDecayed}) {
      SCOPED_TRACE(std::string(record_mode_name(mode)) + ", " +
                   std::to_string(topology.num_layers) + " layers");
      const RecorderOptions options{.mode = mode, .window_size = 16, .decay = 0.9};
      CpuRecorder cpu(topology, options);
      CudaRecorder gpu(topology, options, -1, pass_ring_options(64));
      std::mt19937_64 rng(7);
      cpu.start();
      gpu.start();
      passes_of_every_size(rng, cpu, gpu);
      expect_same_recording(mode, cpu.snapshot(), gpu.snapshot());
    }
  }
}

// per_token mode stages the batch layer by layer, as record_topk would.
TEST(CudaRecordTopkLayers, PerTokenTraceEqualsRecordTopkLayerByLayer) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  const auto path = trace_path("layers");
  const RecorderOptions options{.mode = RecordMode::kPerToken, .per_token_capacity = 1 << 14};
  CpuRecorder cpu(topology, options);
  {
    CudaRecorder gpu(topology, options, -1, CudaOptions{.trace_path = path});
    std::mt19937_64 rng(7);
    cpu.start();
    gpu.start();
    const std::int64_t num_passes = passes_of_every_size(rng, cpu, gpu);
    gpu.drain_trace();
    EXPECT_EQ(gpu.snapshot().num_passes, num_passes);
  }
  expect_trace_holds(path, cpu.snapshot());
}

TEST(CudaRecordTopkLayers, RefusesTheWholeBatchWhenOneLayerIsWrong) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  CudaRecorder gpu(topology, {.mode = RecordMode::kStat, .window_size = 4});
  std::mt19937_64 rng(3);
  const LayerInput good = make_layer(rng, 5, 4, topology.num_physical_experts);
  const LayerInput fewer = make_layer(rng, 6, 2, topology.num_physical_experts);
  gpu.start();
  gpu.begin_pass(0);
  const Recorder::LayerTopk dense_in_the_middle[] = {
      {5, good.device_view(0)}, {1, good.device_view(0)}, {6, good.device_view(0)}};
  EXPECT_MOESTAT_ERROR(gpu.record_topk_layers(dense_in_the_middle),
                       "record_topk_layers: layer 1 is a dense layer");
  const Recorder::LayerTopk rows_differ[] = {{5, good.device_view(0)}, {6, fewer.device_view(0)}};
  EXPECT_MOESTAT_ERROR(gpu.record_topk_layers(rows_differ, 3),
                       "record_topk_layers: num_valid_tokens 3 outside [0, 2]");
  gpu.end_pass();
  MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(gpu.stream()));
  const Snapshot snapshot = gpu.snapshot();
  ASSERT_EQ(snapshot.num_passes, 1);
  for (std::int64_t count : snapshot.physical_counts) ASSERT_EQ(count, 0);
}

/// Kernel nodes of a graph captured from one pass of `record` on `gpu`'s stream.
std::size_t captured_kernel_nodes(CudaRecorder& gpu, const std::function<void()>& record) {
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamBeginCapture(gpu.stream(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  gpu.begin_pass(0);
  record();
  gpu.end_pass();
  EXPECT_EQ(cudaStreamEndCapture(gpu.stream(), &graph), cudaSuccess);
  std::size_t num_nodes = 0;
  EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &num_nodes), cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(num_nodes);
  EXPECT_EQ(cudaGraphGetNodes(graph, nodes.data(), &num_nodes), cudaSuccess);
  std::size_t kernels = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    EXPECT_EQ(cudaGraphNodeGetType(node, &type), cudaSuccess);
    kernels += type == cudaGraphNodeTypeKernel;
  }
  cudaGraphDestroy(graph);
  return kernels;
}

TEST(CudaRecordTopkLayers, AddsOneKernelNodeForAPassOf58Layers) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  CudaRecorder gpu(topology, {.mode = RecordMode::kStat, .window_size = 4});
  cudaStream_t stream;
  MOESTAT_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  gpu.set_stream(stream);
  DeviceArray<std::int32_t> ids(std::size_t(16 * kTopK));
  const TensorView view =
      TensorView::contiguous(ids.data(), DType::kInt32, {16, kTopK}, Device::cuda(0));
  std::vector<Recorder::LayerTopk> layers;
  for (std::int64_t layer : moe_layers_of(topology)) layers.push_back({layer, view});
  ASSERT_EQ(layers.size(), 58u);

  const std::size_t empty_pass = captured_kernel_nodes(gpu, [] {});
  const std::size_t batched = captured_kernel_nodes(gpu, [&] { gpu.record_topk_layers(layers); });
  const std::size_t one_by_one = captured_kernel_nodes(gpu, [&] {
    for (const auto& entry : layers) gpu.record_topk(entry.layer, entry.topk_ids);
  });
  EXPECT_EQ(batched, empty_pass + 1);
  EXPECT_EQ(one_by_one, empty_pass + 58);
  MOESTAT_EXPECT_CUDA(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace moestat::test
