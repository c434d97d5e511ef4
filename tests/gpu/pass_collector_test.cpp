// per_pass mode and unbounded windows on the CUDA backend: passes leave the device ring
// through the collector, whole, in order, equal to the CPU recorder's; passes the ring
// reused before collection are dropped whole and counted exactly.
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/record/cuda_recorder.hpp>

#include "gpu/gpu_test_support.hpp"

namespace moestat::test {
namespace {

using record::CpuRecorder;
using record::CudaOptions;
using record::CudaRecorder;

constexpr std::int64_t kTokens = 40;
constexpr std::int64_t kTopK = 4;

/// Both recorders over the same pre-generated passes: the ids of every pass are on the
/// device before the first one is recorded, so passes can be enqueued without waiting.
class TwinRecorders {
 public:
  static constexpr std::int64_t kLayers[] = {1, 4};
  static constexpr std::int64_t kPassIds = std::size(kLayers) * kTokens * kTopK;

  TwinRecorders(RecorderOptions options, CudaOptions cuda_options, std::int64_t num_passes)
      : topology_(ModelTopology::uniform(6, 32, kTopK)),
        cpu_(topology_, options),
        gpu_(topology_, options, -1, std::move(cuda_options)) {
    std::mt19937_64 rng(17);
    for (std::int64_t pass = 0; pass < num_passes; ++pass) {
      const auto ids = random_ids(rng, std::size(kLayers) * kTokens, kTopK, 32, 0.05, 0.02);
      host_ids_.insert(host_ids_.end(), ids.begin(), ids.end());
      for (std::size_t layer = 0; layer < std::size(kLayers); ++layer) {
        valid_.push_back(std::int64_t(rng() % (kTokens + 1)));
      }
    }
    device_ids_ = std::make_unique<DeviceArray<std::int32_t>>(cast_ids<std::int32_t>(host_ids_));
  }

  void start() {
    cpu_.start();
    gpu_.start();
  }
  void reset() {
    cpu_.reset();
    gpu_.reset();
  }

  /// Records pass `pass` (also its id); the device work is left in flight unless `wait`.
  void pass(std::int64_t pass, bool wait = true) {
    cpu_.begin_pass(pass);
    gpu_.begin_pass(pass);
    for (std::size_t i = 0; i < std::size(kLayers); ++i) {
      const std::int64_t offset = pass * kPassIds + std::int64_t(i) * kTokens * kTopK;
      const std::int64_t valid = valid_[std::size_t(pass) * std::size(kLayers) + i];
      cpu_.record_topk(
          kLayers[i],
          TensorView::contiguous(host_ids_.data() + offset, DType::kInt64, {kTokens, kTopK}),
          valid);
      gpu_.record_topk(kLayers[i],
                       TensorView::contiguous(device_ids_->data() + offset, DType::kInt32,
                                              {kTokens, kTopK}, Device::cuda(0)),
                       valid);
    }
    cpu_.end_pass();
    gpu_.end_pass();
    if (wait) {
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
  }

  CpuRecorder& cpu() { return cpu_; }
  CudaRecorder& gpu() { return gpu_; }

 private:
  ModelTopology topology_;
  CpuRecorder cpu_;
  CudaRecorder gpu_;
  std::vector<std::int64_t> host_ids_;  // [passes, layers, tokens, top_k]
  std::vector<std::int64_t> valid_;     // [passes, layers]
  std::unique_ptr<DeviceArray<std::int32_t>> device_ids_;
};

TEST(CudaPassCollector, PerPassAndUnboundedWindowEqualCpuRecorder) {
  MOESTAT_REQUIRE_GPU();
  // stat_approx keeps its window the same way; only its hook differs.
  for (const RecorderOptions options :
       {RecorderOptions{.mode = RecordMode::kPerPass},
        RecorderOptions{.mode = RecordMode::kStat, .window_size = -1}}) {
    SCOPED_TRACE(std::string(record_mode_name(options.mode)));
    // No thread: snapshots collect every 5 passes from a ring of 8, so nothing is lost
    // whatever the timing, and the ring wraps many times.
    TwinRecorders twins(options, pass_ring_options(8), 203);
    twins.start();
    for (std::int64_t pass = 0; pass < 203; ++pass) {
      twins.pass(pass);
      if (pass % 5 == 4) expect_same_window(twins.cpu().snapshot(), twins.gpu().snapshot());
    }
    const Snapshot actual = twins.gpu().snapshot();
    EXPECT_EQ(actual.window_size(), 203);
    EXPECT_EQ(actual.dropped_passes, 0);
    expect_same_window(twins.cpu().snapshot(), actual);
  }
}

TEST(CudaPassCollector, PassesTheRingReusedAreDroppedWholeAndCounted) {
  MOESTAT_REQUIRE_GPU();
  TwinRecorders twins({.mode = RecordMode::kPerPass}, pass_ring_options(4), 13);
  twins.start();
  for (std::int64_t pass = 0; pass < 3; ++pass) twins.pass(pass);
  ASSERT_EQ(twins.gpu().snapshot().window_size(), 3);  // collected: 0, 1, 2
  for (std::int64_t pass = 3; pass < 13; ++pass) twins.pass(pass);
  // The ring holds the last 4 of passes 3..12: 3..8 were reused before any collection.
  const Snapshot actual = twins.gpu().snapshot();
  EXPECT_EQ(actual.num_passes, 13);
  EXPECT_EQ(actual.dropped_passes, 6);
  EXPECT_EQ(actual.pass_ids, (std::vector<std::int64_t>{0, 1, 2, 9, 10, 11, 12}));

  // The kept passes are exactly the CPU recorder's passes of the same ids.
  const Snapshot expected = twins.cpu().snapshot();
  const std::int64_t pass_size = 6 * 32;
  std::vector<std::int64_t> kept;
  for (std::int64_t id : actual.pass_ids) {
    kept.insert(kept.end(), expected.physical_counts.begin() + id * pass_size,
                expected.physical_counts.begin() + (id + 1) * pass_size);
  }
  EXPECT_EQ(actual.physical_counts, kept);
}

TEST(CudaPassCollector, ResetDiscardsCollectedPasses) {
  MOESTAT_REQUIRE_GPU();
  TwinRecorders twins({.mode = RecordMode::kPerPass}, pass_ring_options(16), 9);
  twins.start();
  for (std::int64_t pass = 0; pass < 5; ++pass) twins.pass(pass);
  ASSERT_EQ(twins.gpu().snapshot().window_size(), 5);
  twins.reset();
  EXPECT_EQ(twins.gpu().snapshot().window_size(), 0);  // the reset has not reached the device
  for (std::int64_t pass = 5; pass < 9; ++pass) twins.pass(pass);
  const Snapshot actual = twins.gpu().snapshot();
  EXPECT_EQ(actual.pass_ids, (std::vector<std::int64_t>{5, 6, 7, 8}));
  expect_same_window(twins.cpu().snapshot(), actual);
}

TEST(CudaPassCollector, ThreadKeepsUpOrCountsEveryPassItMisses) {
  MOESTAT_REQUIRE_GPU();
  // The collector thread races the device: 3000 passes are enqueued without waiting, into a
  // ring of 16. Whatever it misses must be counted, and what it keeps must be whole passes
  // equal to the CPU recorder's, in order.
  constexpr std::int64_t kPasses = 3000;
  TwinRecorders twins({.mode = RecordMode::kPerPass},
                      pass_ring_options(16, std::chrono::microseconds(200)), kPasses);
  twins.start();
  for (std::int64_t pass = 0; pass < kPasses; ++pass) twins.pass(pass, false);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const Snapshot actual = twins.gpu().snapshot();
  const Snapshot expected = twins.cpu().snapshot();
  EXPECT_EQ(actual.num_passes, kPasses);
  EXPECT_EQ(actual.window_size() + actual.dropped_passes, kPasses);
  EXPECT_TRUE(std::is_sorted(actual.pass_ids.begin(), actual.pass_ids.end()));
  const std::int64_t pass_size = 6 * 32;
  for (std::int64_t row = 0; row < actual.window_size(); ++row) {
    const std::int64_t id = actual.pass_ids[std::size_t(row)];
    ASSERT_TRUE(std::equal(actual.physical_counts.begin() + row * pass_size,
                           actual.physical_counts.begin() + (row + 1) * pass_size,
                           expected.physical_counts.begin() + id * pass_size))
        << "pass " << id;
  }
  std::printf("collector thread kept %lld of %lld passes\n", (long long)actual.window_size(),
              (long long)kPasses);
}

}  // namespace
}  // namespace moestat::test
