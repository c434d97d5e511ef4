// Hooks captured into a CUDA graph while no pass is open on the host (SGLang captures its
// decode graphs outside its forward-pass context) count into the pass opened eagerly around
// each replay, and only when that pass records. Eager hooks outside a pass, and per_token
// mode, stay errors. The expected counts are a plain tally of the ids each replay saw.
#include <unistd.h>

#include <filesystem>
#include <moestat/record/cuda_recorder.hpp>
#include <string>

#include "gpu/gpu_test_support.hpp"
#include "unit/expect_error.hpp"

namespace moestat::test {
namespace {

using record::CudaRecorder;

constexpr std::int64_t kRows = 40;  // the captured (padded) batch
constexpr std::int64_t kTopK = 8;
constexpr std::int64_t kLayers[] = {3, 42};

/// Two layers' captured record_topk, with device ids and one device valid-token count.
struct CapturedLayers {
  DeviceArray<std::int32_t> ids32{std::size_t(kRows * kTopK)};  // layer kLayers[0]
  DeviceArray<std::int64_t> ids64{std::size_t(kRows * kTopK)};  // layer kLayers[1]
  DeviceArray<std::int32_t> valid{1};
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;

  ~CapturedLayers() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }

  /// Captures both hooks on `stream` with no begin_pass or end_pass around them.
  void capture(CudaRecorder& recorder, cudaStream_t stream) {
    const TensorView count =
        TensorView::contiguous(valid.data(), DType::kInt32, {1}, Device::cuda(0));
    MOESTAT_EXPECT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    recorder.record_topk(
        kLayers[0],
        TensorView::contiguous(ids32.data(), DType::kInt32, {kRows, kTopK}, Device::cuda(0)),
        count);
    recorder.record_topk(
        kLayers[1],
        TensorView::contiguous(ids64.data(), DType::kInt64, {kRows, kTopK}, Device::cuda(0)),
        count);
    MOESTAT_EXPECT_CUDA(cudaStreamEndCapture(stream, &graph));
    MOESTAT_EXPECT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  }
};

/// What one replay adds to its pass, counted on the host: [L, P] counts of the valid rows,
/// the ids dropped there, and the valid-token count.
struct PassTally {
  std::vector<std::int64_t> counts;
  std::int64_t dropped = 0;
  std::int64_t tokens = 0;
};

PassTally tally(const ModelTopology& topology, const std::vector<std::int64_t> (&ids)[2],
                std::int64_t valid) {
  const std::int64_t num_physical = topology.num_physical_experts;
  PassTally out{std::vector<std::int64_t>(std::size_t(topology.num_layers * num_physical)), 0,
                valid};
  for (int i = 0; i < 2; ++i) {
    for (std::int64_t n = 0; n < valid * kTopK; ++n) {
      const std::int64_t id = ids[i][std::size_t(n)];
      if (id >= 0 && id < num_physical) {
        ++out.counts[std::size_t(kLayers[i] * num_physical + id)];
      } else if (id != -1) {
        ++out.dropped;
      }
    }
  }
  return out;
}

/// The snapshot holds exactly the tallied passes, oldest first.
void expect_passes(const Snapshot& snapshot, const std::vector<std::int64_t>& pass_ids,
                   const std::vector<PassTally>& tallies) {
  std::vector<std::int64_t> counts, tokens;
  std::int64_t dropped = 0;
  for (const PassTally& pass : tallies) {
    counts.insert(counts.end(), pass.counts.begin(), pass.counts.end());
    tokens.push_back(pass.tokens);
    dropped += pass.dropped;
  }
  EXPECT_EQ(snapshot.pass_ids, pass_ids);
  EXPECT_EQ(snapshot.num_passes, std::int64_t(tallies.size()));
  EXPECT_EQ(snapshot.pass_num_tokens, tokens);
  EXPECT_EQ(snapshot.physical_counts, counts);
  EXPECT_EQ(snapshot.dropped_ids, dropped);
}

TEST(CudaRecorderOutsidePass, CapturedHooksCountIntoThePassOpenAtReplay) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  for (RecordMode mode : {RecordMode::kStat, RecordMode::kPerPass}) {
    SCOPED_TRACE(std::string(record_mode_name(mode)));
    CudaRecorder gpu(topology, {.mode = mode, .window_size = 16}, -1, pass_ring_options(64));
    cudaStream_t stream;
    MOESTAT_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    gpu.set_stream(stream);
    CapturedLayers captured;
    captured.capture(gpu, stream);

    // Recording on for passes 0-2 and 6-8, off for 3-5 and 9-10; start() clears what came
    // before it, so each snapshot holds one run of recorded passes.
    std::mt19937_64 rng(11);
    std::vector<std::int64_t> recorded_ids;
    std::vector<PassTally> recorded;
    for (std::int64_t pass = 0; pass < 11; ++pass) {
      if (pass == 0 || pass == 6) {
        gpu.start();
        recorded_ids.clear();
        recorded.clear();
      }
      if (pass == 3 || pass == 9) gpu.stop();
      const bool on = pass < 3 || (pass >= 6 && pass < 9);
      const std::vector<std::int64_t> ids[2] = {
          random_ids(rng, kRows, kTopK, topology.num_physical_experts),
          random_ids(rng, kRows, kTopK, topology.num_physical_experts)};
      const auto valid = std::int64_t(rng() % (kRows + 1));
      captured.ids32.upload(cast_ids<std::int32_t>(ids[0]));
      captured.ids64.upload(ids[1]);
      captured.valid.upload({std::int32_t(valid)});
      gpu.begin_pass(100 + pass);
      MOESTAT_EXPECT_CUDA(cudaGraphLaunch(captured.exec, stream));
      gpu.end_pass();
      MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(stream));
      if (on) {
        recorded_ids.push_back(100 + pass);
        recorded.push_back(tally(topology, ids, valid));
      }
      if (pass == 5 || pass == 10) expect_passes(gpu.snapshot(), recorded_ids, recorded);
    }
    MOESTAT_EXPECT_CUDA(cudaStreamDestroy(stream));
  }
}

TEST(CudaRecorderOutsidePass, EagerHooksAndPerTokenCaptureAreRefused) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  DeviceArray<std::int32_t> ids(std::size_t(kRows * kTopK));
  const TensorView view =
      TensorView::contiguous(ids.data(), DType::kInt32, {kRows, kTopK}, Device::cuda(0));
  cudaStream_t stream;
  MOESTAT_EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // Not capturing: a hook outside a pass would count nowhere.
  CudaRecorder stat(topology, {.mode = RecordMode::kStat, .window_size = 4});
  stat.set_stream(stream);
  EXPECT_MOESTAT_ERROR(stat.record_topk(kLayers[0], view),
                       "record_topk outside a pass: call begin_pass first");

  // per_token tallies its pass's hooks on the host between begin_pass and end_pass.
  const auto trace = std::filesystem::temp_directory_path() /
                     ("moestat-gpu-outside-pass-" + std::to_string(::getpid()) + ".trace");
  {
    CudaRecorder per_token(topology, {.mode = RecordMode::kPerToken}, -1,
                           record::CudaOptions{.trace_path = trace});
    per_token.set_stream(stream);
    MOESTAT_EXPECT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    EXPECT_MOESTAT_ERROR(per_token.record_topk(kLayers[0], view),
                         "per_token mode on the CUDA recorder takes hooks only inside a pass");
    cudaGraph_t graph = nullptr;
    MOESTAT_EXPECT_CUDA(cudaStreamEndCapture(stream, &graph));
    cudaGraphDestroy(graph);
  }
  std::filesystem::remove(trace);
  MOESTAT_EXPECT_CUDA(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace moestat::test
