// The CUDA route recorder against the CPU one fed the same passes: eagerly (int32 and int64
// ids, a strided view with a fused shared-expert column, hostile ids, padding rows, a
// placement with replicas), from a captured CUDA graph replayed with a new batch each
// time (begin_pass / end_pass on the host around each replay), and from eight threads
// (tests/routes/route_threads.hpp); ids of every width a column's bytes come to.
#include <moestat/routes/cpu_route_recorder.hpp>
#include <moestat/routes/cuda_route_recorder.hpp>

#include "gpu/gpu_test_support.hpp"
#include "routes/route_reference.hpp"
#include "routes/route_threads.hpp"

namespace moestat::test {
namespace {

using routes::CpuRouteRecorder;
using routes::CudaRouteRecorder;
using routes::RoutedExperts;

ModelTopology route_topology() {
  ModelTopology topology = ModelTopology::uniform(6, 300, 8);  // uint16 ids
  topology.moe_layers = {false, true, true, true, false, true};
  topology.num_physical_experts = 320;
  topology.ep_size = 8;
  return topology;
}

Placement shifted_placement(const ModelTopology& topology) {
  std::vector<std::int32_t> map;
  for (std::int64_t l = 0; l < topology.num_layers; ++l) {
    for (std::int64_t p = 0; p < topology.num_physical_experts; ++p) {
      map.push_back(std::int32_t((p + 7 * l) % topology.num_logical_experts));
    }
  }
  return Placement(topology.num_layers, topology.num_physical_experts, topology.num_logical_experts,
                   map, 2);
}

std::map<std::string, RoutedExperts> finish_all(routes::RouteRecorder& recorder) {
  std::map<std::string, RoutedExperts> out;
  for (const std::string& request : recorder.requests())
    out.emplace(request, recorder.finish(request));
  return out;
}

TEST(CudaRouteRecorder, EqualsTheCpuRecorderEagerly) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = route_topology();
  const Placement placement = shifted_placement(topology);
  const routes::RouteRecorderOptions options{.max_tokens_per_pass = 64, .capacity_tokens = 2048};
  CpuRouteRecorder cpu(topology, options);
  CudaRouteRecorder gpu(topology, options);
  cpu.set_placement(placement);
  gpu.set_placement(placement);
  const std::vector<std::int32_t> map(placement.physical_to_logical().begin(),
                                      placement.physical_to_logical().end());
  const auto passes = test::random_route_passes(topology, cpu.layout(), map, 60, 6, 5, true);
  const std::int64_t top_k = topology.top_k;
  for (std::size_t p = 0; p < passes.size(); ++p) {
    const test::RoutePass& pass = passes[p];
    cpu.begin_pass();
    gpu.begin_pass();
    std::vector<std::unique_ptr<DeviceArray<std::int64_t>>> keep64;
    std::vector<std::unique_ptr<DeviceArray<std::int32_t>>> keep32;
    std::vector<routes::RouteRecorder::LayerTopk> layers;
    for (std::int64_t c = 0; c < cpu.layout().num_columns(); ++c) {
      const std::int64_t layer = cpu.layout().layers[std::size_t(c)];
      const auto& ids = pass.ids[std::size_t(c)];
      const std::int64_t shape[] = {pass.num_rows, top_k};
      cpu.record_topk(layer, TensorView::contiguous(ids.data(), DType::kInt32, shape));
      if (c % 2 == 0) {
        // int64 with a ninth (fused shared-expert) column the recorder must skip.
        std::vector<std::int64_t> wide;
        for (std::int64_t row = 0; row < pass.num_rows; ++row) {
          for (std::int64_t k = 0; k < top_k; ++k)
            wide.push_back(ids[std::size_t(row * top_k + k)]);
          wide.push_back(topology.num_physical_experts + 1);
        }
        keep64.push_back(std::make_unique<DeviceArray<std::int64_t>>(wide));
        const std::int64_t wide_shape[] = {pass.num_rows, top_k + 1};
        layers.push_back({layer, TensorView::contiguous(keep64.back()->data(), DType::kInt64,
                                                        wide_shape, Device::cuda(0))});
      } else {
        keep32.push_back(std::make_unique<DeviceArray<std::int32_t>>(ids));
        layers.push_back({layer, TensorView::contiguous(keep32.back()->data(), DType::kInt32, shape,
                                                        Device::cuda(0))});
      }
    }
    if (p % 2 == 0) {
      gpu.record_topk_layers(layers);
    } else {
      for (const auto& layer : layers) gpu.record_topk(layer.layer, layer.topk_ids);
    }
    cpu.end_pass(pass.batch);
    gpu.end_pass(pass.batch);
    MOESTAT_EXPECT_CUDA(cudaDeviceSynchronize());  // the id buffers go out of scope
    if (p % 18 == 4) {
      for (const std::string& request : cpu.requests()) {
        ASSERT_EQ(gpu.take(request), cpu.take(request)) << request;
      }
    } else if (p % 18 == 13) {
      // Every request's rows in one read on the GPU, against takes in turn on the CPU.
      const std::vector<std::string> requests = cpu.requests();
      const std::vector<RoutedExperts> taken = gpu.take_many(requests);
      ASSERT_EQ(taken.size(), requests.size());
      for (std::size_t i = 0; i < requests.size(); ++i) {
        ASSERT_EQ(taken[i], cpu.take(requests[i])) << requests[i];
      }
    }
  }
  EXPECT_EQ(finish_all(gpu), finish_all(cpu));
  const routes::RouteTallies cpu_tallies = cpu.tallies();
  const routes::RouteTallies gpu_tallies = gpu.tallies();
  EXPECT_GT(cpu_tallies.invalid_ids, 0);
  EXPECT_EQ(gpu_tallies.invalid_ids, cpu_tallies.invalid_ids);
  EXPECT_EQ(gpu_tallies.tokens_recorded, cpu_tallies.tokens_recorded);
}

TEST(CudaRouteRecorder, ALargeBatchAndAnAbortedPassEqualTheCpuRecorder) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = route_topology();
  // 700 tokens: more row moves than the end-of-pass kernel's parameters hold, so they go
  // through the pinned ring.
  constexpr std::int64_t kRows = 700;
  const routes::RouteRecorderOptions options{.max_tokens_per_pass = 1024, .capacity_tokens = 2048};
  CpuRouteRecorder cpu(topology, options);
  CudaRouteRecorder gpu(topology, options);
  const std::int64_t top_k = topology.top_k;
  std::vector<std::int32_t> ids(std::size_t(kRows * top_k));
  for (std::int64_t row = 0; row < kRows; ++row) {
    for (std::int64_t k = 0; k < top_k; ++k) {
      ids[std::size_t(row * top_k + k)] = std::int32_t((row * 7 + k * 37) % 300);  // distinct
    }
  }
  const DeviceArray<std::int32_t> device_ids(ids);
  const std::int64_t shape[] = {kRows, top_k};
  const auto host_view = TensorView::contiguous(ids.data(), DType::kInt32, shape);
  const auto device_view =
      TensorView::contiguous(device_ids.data(), DType::kInt32, shape, Device::cuda(0));
  const routes::TokenSpan prefill[] = {{"big", 0, kRows}};
  const routes::TokenSpan next[] = {{"big", kRows, 1}};
  for (routes::RouteRecorder* recorder :
       {static_cast<routes::RouteRecorder*>(&cpu), static_cast<routes::RouteRecorder*>(&gpu)}) {
    const TensorView& view = recorder == &cpu ? host_view : device_view;
    recorder->begin_pass();
    for (std::int64_t layer : recorder->layout().layers) recorder->record_topk(layer, view);
    recorder->end_pass(prefill);
    // An aborted pass: what it wrote must not reach the next pass's token.
    recorder->begin_pass();
    for (std::int64_t layer : recorder->layout().layers) recorder->record_topk(layer, view);
    recorder->abort_pass();
    recorder->begin_pass();
    recorder->end_pass(next);
  }
  const RoutedExperts want = cpu.finish("big");
  ASSERT_EQ(want.num_tokens(), kRows + 1);
  EXPECT_FALSE(want.is_valid(kRows, 0));
  EXPECT_EQ(gpu.finish("big"), want);
}

/// Device ids of every column of `pass`, for record_topk_layers.
struct DeviceColumns {
  DeviceColumns(const routes::RouteLayout& layout, const test::RoutePass& pass) {
    const std::int64_t shape[] = {pass.num_rows, layout.top_k};
    for (std::size_t c = 0; c < pass.ids.size(); ++c) {
      ids.push_back(std::make_unique<DeviceArray<std::int32_t>>(pass.ids[c]));
      layers.push_back({layout.layers[c], TensorView::contiguous(ids.back()->data(), DType::kInt32,
                                                                 shape, Device::cuda(0))});
    }
  }
  std::vector<std::unique_ptr<DeviceArray<std::int32_t>>> ids;
  std::vector<routes::RouteRecorder::LayerTopk> layers;
};

void record_on_cpu(CpuRouteRecorder& cpu, const test::RoutePass& pass) {
  const std::int64_t shape[] = {pass.num_rows, cpu.layout().top_k};
  for (std::size_t c = 0; c < pass.ids.size(); ++c) {
    cpu.record_topk(cpu.layout().layers[c],
                    TensorView::contiguous(pass.ids[c].data(), DType::kInt32, shape));
  }
}

// A column's top_k ids of 1, 2 or 4 bytes make 3 to 32 bytes: widths odd and even, moved at
// the pass's end and read by take_many(), against the CPU recorder.
class CudaRouteRecorderWidths
    : public ::testing::TestWithParam<std::pair<std::int64_t, std::int64_t>> {};

TEST_P(CudaRouteRecorderWidths, EqualTheCpuRecorder) {
  MOESTAT_REQUIRE_GPU();
  const auto [num_experts, top_k] = GetParam();
  const ModelTopology topology = ModelTopology::uniform(3, num_experts, top_k);
  const routes::RouteRecorderOptions options{.max_tokens_per_pass = 64, .capacity_tokens = 1024};
  CpuRouteRecorder cpu(topology, options);
  CudaRouteRecorder gpu(topology, options);
  const std::vector<std::int32_t> map = test::identity_map(topology);
  const auto passes = test::random_route_passes(topology, cpu.layout(), map, 40, 6, 3, true);
  for (std::size_t p = 0; p < passes.size(); ++p) {
    cpu.begin_pass();
    gpu.begin_pass();
    record_on_cpu(cpu, passes[p]);
    const DeviceColumns columns(gpu.layout(), passes[p]);
    gpu.record_topk_layers(columns.layers);
    cpu.end_pass(passes[p].batch);
    gpu.end_pass(passes[p].batch);
    MOESTAT_EXPECT_CUDA(cudaDeviceSynchronize());  // the id buffers go out of scope
    if (p % 10 == 9) {
      const std::vector<std::string> requests = cpu.requests();
      const std::vector<RoutedExperts> taken = gpu.take_many(requests);
      for (std::size_t i = 0; i < requests.size(); ++i) {
        ASSERT_EQ(taken[i], cpu.take(requests[i])) << requests[i];
      }
    }
  }
  EXPECT_EQ(finish_all(gpu), finish_all(cpu));
  EXPECT_EQ(gpu.tallies().invalid_ids, cpu.tallies().invalid_ids);
}

INSTANTIATE_TEST_SUITE_P(
    ColumnBytes, CudaRouteRecorderWidths,
    ::testing::Values(std::pair<std::int64_t, std::int64_t>{300, 8},    // uint16 x 8: 16 bytes
                      std::pair<std::int64_t, std::int64_t>{128, 8},    // uint8 x 8: 8
                      std::pair<std::int64_t, std::int64_t>{128, 4},    // 4
                      std::pair<std::int64_t, std::int64_t>{128, 6},    // 6: in 2-byte units
                      std::pair<std::int64_t, std::int64_t>{128, 3},    // 3: in bytes
                      std::pair<std::int64_t, std::int64_t>{70000, 2},  // int32 x 2: 8
                      std::pair<std::int64_t, std::int64_t>{70000, 5}   // int32 x 5: 20, in 4s
                      ));

struct CapturedGraph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~CapturedGraph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
};

TEST(CudaRouteRecorder, ReplaysOfACapturedGraphEqualTheCpuRecorder) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = route_topology();
  constexpr std::int64_t kRows = 24;  // the captured (padded) batch
  const routes::RouteRecorderOptions options{.max_tokens_per_pass = kRows, .capacity_tokens = 4096};
  CpuRouteRecorder cpu(topology, options);
  CudaRouteRecorder gpu(topology, options);
  const std::vector<std::int32_t> map = test::identity_map(topology);
  cudaStream_t stream;
  MOESTAT_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  gpu.set_stream(stream);

  const std::int64_t num_columns = cpu.layout().num_columns();
  const std::int64_t top_k = topology.top_k;
  std::vector<std::unique_ptr<DeviceArray<std::int32_t>>> ids;
  std::vector<routes::RouteRecorder::LayerTopk> layers;
  const std::int64_t shape[] = {kRows, top_k};
  for (std::int64_t c = 0; c < num_columns; ++c) {
    ids.push_back(std::make_unique<DeviceArray<std::int32_t>>(std::size_t(kRows * top_k)));
    layers.push_back(
        {cpu.layout().layers[std::size_t(c)],
         TensorView::contiguous(ids.back()->data(), DType::kInt32, shape, Device::cuda(0))});
  }
  CapturedGraph captured;
  MOESTAT_EXPECT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  gpu.record_topk_layers(layers);  // no pass open: the stream is being captured
  EXPECT_THROW(gpu.begin_pass(), Error);
  MOESTAT_EXPECT_CUDA(cudaStreamEndCapture(stream, &captured.graph));
  MOESTAT_EXPECT_CUDA(cudaGraphInstantiate(&captured.exec, captured.graph, 0));

  auto passes = test::random_route_passes(topology, cpu.layout(), map, 200, 5, 9, false);
  for (test::RoutePass& pass : passes) {
    if (pass.num_rows > kRows) continue;  // the captured batch holds at most kRows
    // The padded rows of the captured batch hold whatever ids; they must not be recorded.
    for (auto& column : pass.ids) {
      for (std::size_t i = column.size(); i < std::size_t(kRows * top_k); ++i) {
        column.push_back(std::int32_t(i % std::size_t(top_k)));  // experts 0..7
      }
    }
    pass.num_rows = kRows;
    cpu.begin_pass();
    for (std::int64_t c = 0; c < num_columns; ++c) {
      cpu.record_topk(
          layers[std::size_t(c)].layer,
          TensorView::contiguous(pass.ids[std::size_t(c)].data(), DType::kInt32, shape));
      MOESTAT_EXPECT_CUDA(cudaMemcpyAsync(
          ids[std::size_t(c)]->data(), pass.ids[std::size_t(c)].data(),
          pass.ids[std::size_t(c)].size() * sizeof(std::int32_t), cudaMemcpyHostToDevice, stream));
    }
    cpu.end_pass(pass.batch);
    gpu.begin_pass();
    MOESTAT_EXPECT_CUDA(cudaGraphLaunch(captured.exec, stream));
    gpu.end_pass(pass.batch);
    MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(stream));  // the host ids are reused
  }
  EXPECT_EQ(finish_all(gpu), finish_all(cpu));
  EXPECT_EQ(gpu.tallies().layers_written_twice, 0);
  // A replay twice in one pass: the second replay's rows are written twice, and tallied.
  gpu.begin_pass();
  MOESTAT_EXPECT_CUDA(cudaGraphLaunch(captured.exec, stream));
  MOESTAT_EXPECT_CUDA(cudaGraphLaunch(captured.exec, stream));
  const routes::TokenSpan one[] = {{"twice", 0, 1}};
  gpu.end_pass(one);
  EXPECT_EQ(gpu.tallies().layers_written_twice, kRows * num_columns);
  EXPECT_GT(cpu.tallies().passes, 100);
  gpu.set_stream(nullptr);
  MOESTAT_EXPECT_CUDA(cudaStreamDestroy(stream));
}

TEST(CudaRouteRecorder, APassMapsThroughOnePlacementWhateverTheThreads) {
  MOESTAT_REQUIRE_GPU();
  CudaRouteRecorder recorder(
      test::threads_route_topology(),
      {.max_tokens_per_pass = test::kThreadRows, .capacity_tokens = test::kThreadCapacity});
  std::vector<std::unique_ptr<DeviceArray<std::int32_t>>> ids;
  for (std::int64_t l = 0; l < test::kThreadLayers; ++l) {
    ids.push_back(std::make_unique<DeviceArray<std::int32_t>>(test::thread_layer_ids(l)));
  }
  test::hammer_route_recorder(recorder, [&](std::int64_t layer) {
    const std::int64_t shape[] = {test::kThreadRows, test::kThreadTopK};
    return TensorView::contiguous(ids[std::size_t(layer)]->data(), DType::kInt32, shape,
                                  Device::cuda(0));
  });
  MOESTAT_EXPECT_CUDA(cudaDeviceSynchronize());  // the id buffers go out of scope
}

}  // namespace
}  // namespace moestat::test
