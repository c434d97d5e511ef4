// Recorder hooks on the CPU backend: every error path, LayerScope and DisabledRegion, the
// control calls' effect, and small hand-computed examples of each mode.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <moestat/record/cpu_recorder.hpp>
#include <tuple>
#include <vector>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

using record::CpuRecorder;

// ---- Naive reference ----

// Layer 0 is dense; P = 8 slots over E = 4 experts (trivial map p % 4), two ranks of four
// local experts, one trailing shared-expert slot in local counts.
constexpr std::int64_t kLayers = 4;
constexpr std::int64_t kLogical = 4;
constexpr std::int64_t kPhysical = 8;
constexpr std::int64_t kTopK = 2;

ModelTopology test_topology() {
  ModelTopology topology;
  topology.num_layers = kLayers;
  topology.moe_layers = std::vector<bool>{false, true, true, true};
  topology.num_logical_experts = kLogical;
  topology.num_physical_experts = kPhysical;
  topology.top_k = kTopK;
  topology.ep_size = 2;
  topology.num_shared_expert_slots = 1;
  return topology;
}

RecorderOptions with_mode(RecordMode mode) {
  RecorderOptions options;
  options.mode = mode;
  return options;
}

/// [L, P] counts of one layer's ids: each id in [0, P) adds one; other ids do not count.
std::vector<std::int64_t> reference_layer_counts(std::int64_t layer,
                                                 const std::vector<std::int32_t>& ids) {
  std::vector<std::int64_t> counts(std::size_t(kLayers * kPhysical), 0);
  for (std::int32_t id : ids) {
    if (id >= 0 && id < kPhysical) ++counts[std::size_t(layer * kPhysical + id)];
  }
  return counts;
}

/// Physical [L, P] to logical [L, E] under the trivial map p % E.
std::vector<std::int64_t> reference_trivial_logical(const std::vector<std::int64_t>& physical) {
  std::vector<std::int64_t> logical(std::size_t(kLayers * kLogical), 0);
  for (std::int64_t l = 0; l < kLayers; ++l)
    for (std::int64_t p = 0; p < kPhysical; ++p)
      logical[std::size_t(l * kLogical + p % kLogical)] += physical[std::size_t(l * kPhysical + p)];
  return logical;
}

TensorView ids_view(const std::vector<std::int32_t>& ids, std::int64_t columns = kTopK,
                    Device device = Device::cpu()) {
  return TensorView::contiguous(ids.data(), DType::kInt32,
                                {std::int64_t(ids.size()) / columns, columns}, device);
}

TensorView counts_view(const std::vector<std::int64_t>& counts, Device device = Device::cpu()) {
  return TensorView::contiguous(counts.data(), DType::kInt64, {std::int64_t(counts.size())},
                                device);
}

class RecorderHooks : public ::testing::Test {
 protected:
  RecorderHooks() : recorder_(test_topology(), with_mode(RecordMode::kStat)) { recorder_.start(); }

  /// Expects a snapshot with exactly one pass whose counts are `physical`.
  void expect_one_pass(const std::vector<std::int64_t>& physical) {
    const Snapshot snapshot = recorder_.snapshot();
    ASSERT_EQ(snapshot.window_size(), 1);
    EXPECT_EQ(snapshot.physical_counts, physical);
    EXPECT_EQ(snapshot.logical_counts, reference_trivial_logical(physical));
  }

  CpuRecorder recorder_;
  const std::vector<std::int32_t> ids_ = {0, 1, 2, 3, 5, 5};  // 3 tokens x 2
  const std::vector<std::int64_t> local_ = {1, 2, 3, 4, 9};   // 4 local + 1 shared
};

// ---- layer errors ----

TEST_F(RecorderHooks, HookWithNoLayerIsAnError) {
  recorder_.begin_pass(1);
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(ids_view(ids_)), "record_topk with no layer");
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(ids_view(ids_), 2), "record_topk with no layer");
  EXPECT_MOESTAT_ERROR(recorder_.record_local_counts(counts_view(local_), 0),
                       "record_local_counts with no layer");
  // An explicit -1 is out of range; it never falls back to slot 0.
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(-1, ids_view(ids_)), "layer -1 out of range");
  recorder_.end_pass();
  expect_one_pass(std::vector<std::int64_t>(kLayers * kPhysical, 0));
}

TEST_F(RecorderHooks, LayerOutOfRangeIsAnError) {
  recorder_.begin_pass(1);
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(4, ids_view(ids_)),
                       "record_topk: layer 4 out of range [0, 4)");
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(-2, ids_view(ids_)), "layer -2 out of range");
  EXPECT_MOESTAT_ERROR(recorder_.record_local_counts(100, counts_view(local_), 0),
                       "record_local_counts: layer 100 out of range");
  recorder_.end_pass();
}

TEST_F(RecorderHooks, DenseLayerIsAnError) {
  recorder_.begin_pass(1);
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(0, ids_view(ids_)),
                       "record_topk: layer 0 is a dense layer");
  EXPECT_MOESTAT_ERROR(recorder_.record_local_counts(0, counts_view(local_), 1),
                       "record_local_counts: layer 0 is a dense layer");
  recorder_.end_pass();
}

// ---- pass state errors ----

TEST_F(RecorderHooks, HookOutsideAPassIsAnError) {
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(1, ids_view(ids_)),
                       "record_topk outside a pass: call begin_pass first");
  EXPECT_MOESTAT_ERROR(recorder_.record_local_counts(1, counts_view(local_), 0),
                       "record_local_counts outside a pass");
  recorder_.begin_pass(1);
  recorder_.end_pass();
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(1, ids_view(ids_)), "outside a pass");
}

TEST_F(RecorderHooks, BeginPassTwiceIsAnError) {
  recorder_.begin_pass(1);
  EXPECT_MOESTAT_ERROR(recorder_.begin_pass(2), "begin_pass(2) while a pass is open");
  recorder_.record_topk(1, ids_view(ids_));
  recorder_.end_pass();
  // The failed begin_pass did not replace the open pass's id.
  EXPECT_EQ(recorder_.snapshot().pass_ids, std::vector<std::int64_t>{1});
}

TEST_F(RecorderHooks, EndPassWithoutBeginIsAnError) {
  EXPECT_MOESTAT_ERROR(recorder_.end_pass(), "end_pass without begin_pass");
  recorder_.begin_pass(1);
  recorder_.end_pass();
  EXPECT_MOESTAT_ERROR(recorder_.end_pass(), "end_pass without begin_pass");
  EXPECT_EQ(recorder_.snapshot().num_passes, 1);
}

TEST_F(RecorderHooks, PassStateIsCheckedWhileNotRecording) {
  recorder_.stop();
  EXPECT_MOESTAT_ERROR(recorder_.end_pass(), "end_pass without begin_pass");
  recorder_.begin_pass(1);
  EXPECT_MOESTAT_ERROR(recorder_.begin_pass(2), "while a pass is open");
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(0, ids_view(ids_)), "dense layer");
  recorder_.end_pass();
}

// ---- topk_ids errors ----

TEST_F(RecorderHooks, TopkIdsMustBeTwoDimensional) {
  recorder_.begin_pass(1);
  EXPECT_MOESTAT_ERROR(
      recorder_.record_topk(1, TensorView::contiguous(ids_.data(), DType::kInt32, {6})),
      "topk_ids must be 2-d, got 1-d");
  EXPECT_MOESTAT_ERROR(
      recorder_.record_topk(1, TensorView::contiguous(ids_.data(), DType::kInt32, {1, 3, 2})),
      "topk_ids must be 2-d, got 3-d");
  recorder_.end_pass();
}

TEST_F(RecorderHooks, TopkIdsMustBeInteger) {
  const std::vector<float> floats(6, 1.0f);
  const std::vector<std::uint8_t> flags(6, 1);
  recorder_.begin_pass(1);
  EXPECT_MOESTAT_ERROR(
      recorder_.record_topk(1, TensorView::contiguous(floats.data(), DType::kFloat32, {3, 2})),
      "topk_ids must be int32 or int64, got float32");
  EXPECT_MOESTAT_ERROR(
      recorder_.record_topk(1, TensorView::contiguous(flags.data(), DType::kBool, {3, 2})),
      "topk_ids must be int32 or int64, got bool");
  recorder_.end_pass();
}

TEST_F(RecorderHooks, NumValidTokensMustBeInRange) {
  recorder_.begin_pass(1);
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(1, ids_view(ids_), -5),
                       "num_valid_tokens -5 outside [0, 3]");
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(1, ids_view(ids_), -2),
                       "num_valid_tokens -2 outside [0, 3]");
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(1, ids_view(ids_), 4),
                       "num_valid_tokens 4 outside [0, 3]");
  EXPECT_NO_THROW(recorder_.record_topk(1, ids_view(ids_), 0));
  EXPECT_NO_THROW(recorder_.record_topk(1, ids_view(ids_), 3));
  EXPECT_NO_THROW(recorder_.record_topk(1, ids_view(ids_), Recorder::kAllTokens));
  recorder_.end_pass();
  std::vector<std::int64_t> expected = reference_layer_counts(1, ids_);
  for (auto& count : expected) count *= 2;
  expect_one_pass(expected);
}

TEST_F(RecorderHooks, NumValidTokensTensorIsChecked) {
  const std::vector<std::int64_t> two = {1, 1};
  const std::vector<float> one_float = {1.0f};
  const std::vector<std::int32_t> too_many = {4};
  const std::vector<std::int32_t> negative = {-1};
  recorder_.begin_pass(1);
  EXPECT_MOESTAT_ERROR(
      recorder_.record_topk(1, ids_view(ids_),
                            TensorView::contiguous(one_float.data(), DType::kFloat32, {1})),
      "num_valid_tokens must be int32 or int64, got float32");
  EXPECT_MOESTAT_ERROR(
      recorder_.record_topk(1, ids_view(ids_),
                            TensorView::contiguous(two.data(), DType::kInt64, {2})),
      "num_valid_tokens must hold one element, got 2");
  EXPECT_MOESTAT_ERROR(
      recorder_.record_topk(1, ids_view(ids_),
                            TensorView::contiguous(too_many.data(), DType::kInt32, {1})),
      "num_valid_tokens 4 outside [0, 3]");
  EXPECT_MOESTAT_ERROR(
      recorder_.record_topk(1, ids_view(ids_),
                            TensorView::contiguous(negative.data(), DType::kInt32, {})),
      "num_valid_tokens -1 outside [0, 3]");
  // A default view has no data: an error, not a read through a null pointer.
  EXPECT_THROW(recorder_.record_topk(1, ids_view(ids_), TensorView()), Error);
  recorder_.end_pass();
  expect_one_pass(std::vector<std::int64_t>(kLayers * kPhysical, 0));
}

TEST_F(RecorderHooks, NumValidTokensTensorOfAnyOneElementShape) {
  const std::vector<std::int64_t> two = {2};
  recorder_.begin_pass(1);
  recorder_.record_topk(1, ids_view(ids_), TensorView::contiguous(two.data(), DType::kInt64, {}));
  recorder_.record_topk(2, ids_view(ids_), TensorView::contiguous(two.data(), DType::kInt64, {1}));
  recorder_.record_topk(3, ids_view(ids_),
                        TensorView::contiguous(two.data(), DType::kInt64, {1, 1}));
  recorder_.end_pass();
  const std::vector<std::int32_t> first_two(ids_.begin(), ids_.begin() + 4);
  std::vector<std::int64_t> expected(kLayers * kPhysical, 0);
  for (std::int64_t layer = 1; layer < 4; ++layer) {
    const auto counts = reference_layer_counts(layer, first_two);
    for (std::size_t i = 0; i < counts.size(); ++i) expected[i] += counts[i];
  }
  expect_one_pass(expected);
  EXPECT_EQ(recorder_.snapshot().pass_num_tokens, std::vector<std::int64_t>{2});
}

TEST(RecorderModes, PerTokenNeedsExactlyTopKColumns) {
  CpuRecorder recorder(test_topology(), with_mode(RecordMode::kPerToken));
  recorder.start();
  const std::vector<std::int32_t> three_columns = {0, 1, 2, 3, 4, 5};
  recorder.begin_pass(1);
  EXPECT_MOESTAT_ERROR(recorder.record_topk(1, ids_view(three_columns, 3)),
                       "per_token mode needs topk_ids with top_k = 2 columns, got 3");
  EXPECT_MOESTAT_ERROR(recorder.record_topk(1, ids_view(three_columns, 1)), "got 1");
  EXPECT_NO_THROW(recorder.record_topk(1, ids_view(three_columns, 2)));
  recorder.end_pass();
  EXPECT_EQ(recorder.snapshot().num_tokens(), 3);
}

TEST(RecorderModes, OtherModesAcceptExtraFusedColumns) {
  CpuRecorder recorder(test_topology(), with_mode(RecordMode::kStat));
  recorder.start();
  // A fused shared-expert column holds id P, which is dropped and tallied.
  const std::vector<std::int32_t> ids = {0, 1, kPhysical, 2, 3, kPhysical};
  recorder.begin_pass(1);
  recorder.record_topk(2, ids_view(ids, 3));
  recorder.end_pass();
  const Snapshot snapshot = recorder.snapshot();
  EXPECT_EQ(snapshot.physical_counts, reference_layer_counts(2, ids));
  EXPECT_EQ(snapshot.dropped_ids, 2);
}

TEST(RecorderModes, RecordTopkInStatApproxIsAnError) {
  CpuRecorder recorder(test_topology(), with_mode(RecordMode::kStatApprox));
  recorder.start();
  const std::vector<std::int32_t> ids = {0, 1};
  const std::int32_t one = 1;
  recorder.begin_pass(1);
  EXPECT_MOESTAT_ERROR(recorder.record_topk(1, ids_view(ids)), "record_topk in stat_approx mode");
  EXPECT_MOESTAT_ERROR(
      recorder.record_topk(1, ids_view(ids), TensorView::contiguous(&one, DType::kInt32, {})),
      "record_topk in stat_approx mode");
  {
    auto scope = recorder.layer_scope(1);
    EXPECT_MOESTAT_ERROR(recorder.record_topk(ids_view(ids)), "record_topk in stat_approx mode");
  }
  recorder.end_pass();
}

TEST(RecorderModes, RecordLocalCountsInPerTokenIsAnError) {
  CpuRecorder recorder(test_topology(), with_mode(RecordMode::kPerToken));
  recorder.start();
  const std::vector<std::int64_t> counts = {1, 2, 3, 4, 0};
  recorder.begin_pass(1);
  EXPECT_MOESTAT_ERROR(recorder.record_local_counts(1, counts_view(counts), 0),
                       "record_local_counts in per_token mode");
  recorder.end_pass();
}

// ---- local counts errors ----

TEST_F(RecorderHooks, LocalCountsMustHaveLocalPlusSharedEntries) {
  const std::vector<std::int64_t> short_counts = {1, 2, 3, 4};
  const std::vector<std::int64_t> long_counts = {1, 2, 3, 4, 5, 6};
  recorder_.begin_pass(1);
  EXPECT_MOESTAT_ERROR(
      recorder_.record_local_counts(1, counts_view(short_counts), 0),
      "local counts have 4 entries, expected 4 local experts + 1 shared-expert slots");
  EXPECT_MOESTAT_ERROR(recorder_.record_local_counts(1, counts_view(long_counts), 0),
                       "local counts have 6 entries");
  recorder_.end_pass();
}

TEST_F(RecorderHooks, LocalCountsMustBeOneDimensionalIntegers) {
  const std::vector<double> floats(5, 1.0);
  recorder_.begin_pass(1);
  EXPECT_MOESTAT_ERROR(recorder_.record_local_counts(
                           1, TensorView::contiguous(local_.data(), DType::kInt64, {1, 5}), 0),
                       "local counts must be 1-d, got 2-d");
  EXPECT_MOESTAT_ERROR(recorder_.record_local_counts(
                           1, TensorView::contiguous(floats.data(), DType::kFloat64, {5}), 0),
                       "local counts must be int32 or int64, got float64");
  recorder_.end_pass();
}

TEST_F(RecorderHooks, LocalCountsRejectNegativeEntriesAndAddNothing) {
  const std::vector<std::int64_t> bad = {1, 2, -3, 4, 0};
  recorder_.begin_pass(1);
  EXPECT_MOESTAT_ERROR(recorder_.record_local_counts(2, counts_view(bad), 1),
                       "local counts: entry 2 is negative (-3)");
  recorder_.end_pass();
  // Entries 0 and 1 were valid but the call was rejected as a whole.
  expect_one_pass(std::vector<std::int64_t>(kLayers * kPhysical, 0));
}

TEST_F(RecorderHooks, LocalCountsWhoseSumOverflowsAreRefusedAndAddNothing) {
  // Issue 14, item 7: 2^62 twice wrapped to -2^63 through Python's record_local_counts.
  constexpr std::int64_t kHalf = std::int64_t{1} << 62;
  const std::vector<std::int64_t> big = {kHalf, 1, 0, 0, 0};
  recorder_.begin_pass(1);
  recorder_.record_local_counts(1, counts_view(big), 0);
  EXPECT_MOESTAT_ERROR(recorder_.record_local_counts(1, counts_view(big), 0),
                       "record_local_counts: layer 1, physical expert 0: the pass's count "
                       "overflows int64");
  recorder_.end_pass();
  // The refused call added nothing, not even its entry 1.
  std::vector<std::int64_t> expected(kLayers * kPhysical, 0);
  expected[kPhysical] = kHalf;
  expected[kPhysical + 1] = 1;
  expect_one_pass(expected);
}

TEST_F(RecorderHooks, ReplicasWhoseLogicalSumOverflowsFailTheSnapshot) {
  // Slots 0 and 4 both hold expert 0 (p % 4): each count fits, their logical sum does not.
  const std::vector<std::int64_t> big = {std::numeric_limits<std::int64_t>::max(), 0, 0, 0, 0};
  recorder_.begin_pass(1);
  recorder_.record_local_counts(1, counts_view(big), 0);
  recorder_.record_local_counts(1, counts_view(big), 1);
  recorder_.end_pass();
  EXPECT_MOESTAT_ERROR(static_cast<void>(recorder_.snapshot()), "a logical count overflows int64");
}

TEST_F(RecorderHooks, LocalCountsRankMustBeInRange) {
  recorder_.begin_pass(1);
  EXPECT_MOESTAT_ERROR(recorder_.record_local_counts(1, counts_view(local_), 2),
                       "local counts: rank 2 out of range [0, 2)");
  EXPECT_MOESTAT_ERROR(recorder_.record_local_counts(1, counts_view(local_), -1),
                       "rank -1 out of range");
  recorder_.end_pass();
}

TEST_F(RecorderHooks, LocalCountsLandAtTheRankOffsetAndDropSharedSlots) {
  recorder_.begin_pass(1);
  recorder_.record_local_counts(3, counts_view(local_), 1);
  recorder_.record_local_counts(3, counts_view(local_), 0);
  recorder_.end_pass();
  std::vector<std::int64_t> expected(kLayers * kPhysical, 0);
  for (std::int64_t j = 0; j < 4; ++j) {
    expected[std::size_t(3 * kPhysical + j)] = local_[std::size_t(j)];
    expected[std::size_t(3 * kPhysical + 4 + j)] = local_[std::size_t(j)];
  }
  expect_one_pass(expected);
  const Snapshot snapshot = recorder_.snapshot();
  EXPECT_EQ(snapshot.pass_num_tokens, std::vector<std::int64_t>{0});
  EXPECT_EQ(snapshot.dropped_ids, 0);
}

// ---- device checks ----

TEST_F(RecorderHooks, CudaViewsAreRejectedWhileRecording) {
  const std::int32_t two = 2;
  recorder_.begin_pass(1);
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(1, ids_view(ids_, kTopK, Device::cuda(0))),
                       "topk_ids is in CUDA memory");
  EXPECT_MOESTAT_ERROR(
      recorder_.record_topk(1, ids_view(ids_),
                            TensorView::contiguous(&two, DType::kInt32, {1}, Device::cuda(0))),
      "num_valid_tokens is in CUDA memory");
  EXPECT_MOESTAT_ERROR(recorder_.record_local_counts(1, counts_view(local_, Device::cuda(0)), 0),
                       "local counts is in CUDA memory");
  recorder_.end_pass();
  expect_one_pass(std::vector<std::int64_t>(kLayers * kPhysical, 0));
}

TEST_F(RecorderHooks, CudaViewsAreRejectedWhileStopped) {
  // The same call must not succeed or fail depending on whether recording is on.
  recorder_.stop();
  const std::int32_t two = 2;
  recorder_.begin_pass(1);
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(1, ids_view(ids_, kTopK, Device::cuda(0))),
                       "topk_ids is in CUDA memory");
  EXPECT_MOESTAT_ERROR(
      recorder_.record_topk(1, ids_view(ids_),
                            TensorView::contiguous(&two, DType::kInt32, {1}, Device::cuda(0))),
      "num_valid_tokens is in CUDA memory");
  EXPECT_MOESTAT_ERROR(recorder_.record_local_counts(1, counts_view(local_, Device::cuda(0)), 0),
                       "local counts is in CUDA memory");
  recorder_.end_pass();
}

TEST_F(RecorderHooks, DataErrorsAreReportedWhileStopped) {
  recorder_.stop();
  const std::vector<std::int64_t> bad = {1, 2, -3, 4, 0};
  const std::int32_t too_many = 4;
  recorder_.begin_pass(1);
  EXPECT_MOESTAT_ERROR(recorder_.record_local_counts(2, counts_view(bad), 1), "is negative (-3)");
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(1, ids_view(ids_),
                                             TensorView::contiguous(&too_many, DType::kInt32, {})),
                       "num_valid_tokens 4 outside [0, 3]");
  recorder_.end_pass();
}

// ---- placement ----

TEST_F(RecorderHooks, SetPlacementChecksShape) {
  EXPECT_MOESTAT_ERROR(
      recorder_.set_placement(Placement::trivial(3, kPhysical, kLogical, 1)),
      "placement is [L=3, P=8] over E=4 experts but the topology has L=4, P=8, E=4");
  EXPECT_MOESTAT_ERROR(recorder_.set_placement(Placement::trivial(kLayers, 12, kLogical, 1)),
                       "placement is [L=4, P=12]");
  EXPECT_MOESTAT_ERROR(recorder_.set_placement(Placement::trivial(kLayers, kPhysical, 2, 1)),
                       "over E=2 experts");
}

TEST_F(RecorderHooks, SetPlacementNeedsIncreasingVersions) {
  EXPECT_MOESTAT_ERROR(recorder_.set_placement(Placement::trivial(kLayers, kPhysical, kLogical, 0)),
                       "placement version 0 must be higher than the current version 0");
  recorder_.set_placement(Placement::trivial(kLayers, kPhysical, kLogical, 5));
  EXPECT_MOESTAT_ERROR(recorder_.set_placement(Placement::trivial(kLayers, kPhysical, kLogical, 5)),
                       "placement version 5 must be higher than the current version 5");
  EXPECT_MOESTAT_ERROR(recorder_.set_placement(Placement::trivial(kLayers, kPhysical, kLogical, 3)),
                       "version 3 must be higher than the current version 5");
  // Clearing the data keeps the current placement and its version.
  recorder_.reset();
  recorder_.start();
  EXPECT_MOESTAT_ERROR(recorder_.set_placement(Placement::trivial(kLayers, kPhysical, kLogical, 5)),
                       "current version 5");
  EXPECT_NO_THROW(recorder_.set_placement(Placement::trivial(kLayers, kPhysical, kLogical, 6)));
}

TEST_F(RecorderHooks, PassesUseThePlacementInForceWhenTheyEnd) {
  // Version 1 swaps the experts of slots 0 and 1 in layer 1.
  std::vector<std::int32_t> map(kLayers * kPhysical);
  for (std::int64_t i = 0; i < kLayers * kPhysical; ++i) map[std::size_t(i)] = std::int32_t(i % 4);
  std::swap(map[kPhysical + 0], map[kPhysical + 1]);
  const std::vector<std::int32_t> ids = {0, 0};
  recorder_.begin_pass(1);
  recorder_.record_topk(1, ids_view(ids));
  recorder_.end_pass();
  recorder_.begin_pass(2);
  recorder_.record_topk(1, ids_view(ids));
  recorder_.set_placement(Placement(kLayers, kPhysical, kLogical, map, 1));
  recorder_.end_pass();
  const Snapshot snapshot = recorder_.snapshot();
  EXPECT_EQ(snapshot.placement_versions, (std::vector<std::uint64_t>{0, 1}));
  // Pass 1: slot 0 is expert 0. Pass 2 ended under version 1: slot 0 is expert 1.
  EXPECT_EQ(snapshot.logical_counts[std::size_t(kLogical + 0)], 2);
  EXPECT_EQ(snapshot.logical_counts[std::size_t(kLayers * kLogical + kLogical + 1)], 2);
  EXPECT_EQ(snapshot.logical_counts[std::size_t(kLayers * kLogical + kLogical + 0)], 0);
}

// ---- LayerScope ----

TEST_F(RecorderHooks, LayerScopesNestAndRestoreThePreviousLayer) {
  const std::vector<std::int32_t> one = {0, 1};
  const std::vector<std::int64_t> local = {1, 0, 0, 0, 0};
  recorder_.begin_pass(1);
  {
    auto outer = recorder_.layer_scope(1);
    recorder_.record_topk(ids_view(one));
    {
      auto inner = recorder_.layer_scope(3);
      recorder_.record_topk(ids_view(one));
      recorder_.record_local_counts(counts_view(local), 1);
    }
    recorder_.record_topk(ids_view(one));
    recorder_.record_local_counts(counts_view(local), 0);
  }
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(ids_view(one)), "record_topk with no layer");
  recorder_.end_pass();
  std::vector<std::int64_t> expected(kLayers * kPhysical, 0);
  expected[kPhysical + 0] = 2 + 1;  // two topk calls + local counts of rank 0
  expected[kPhysical + 1] = 2;
  expected[3 * kPhysical + 0] = 1;
  expected[3 * kPhysical + 1] = 1;
  expected[3 * kPhysical + 4] = 1;  // rank 1's local slot 0
  expect_one_pass(expected);
}

TEST_F(RecorderHooks, LayerScopeOnABadLayerFailsAtTheHook) {
  recorder_.begin_pass(1);
  {
    auto scope = recorder_.layer_scope(0);
    EXPECT_MOESTAT_ERROR(recorder_.record_topk(ids_view(ids_)), "layer 0 is a dense layer");
  }
  {
    auto scope = recorder_.layer_scope(9);
    EXPECT_MOESTAT_ERROR(recorder_.record_topk(ids_view(ids_)), "layer 9 out of range");
  }
  recorder_.end_pass();
}

// ---- DisabledRegion ----

TEST_F(RecorderHooks, DisabledRegionIgnoresHooksEvenErroneousOnes) {
  const std::vector<float> floats(4, 0.0f);
  recorder_.begin_pass(1);
  recorder_.record_topk(1, ids_view(ids_));
  {
    auto region = recorder_.disabled_region();
    EXPECT_NO_THROW(recorder_.record_topk(ids_view(ids_)));         // no layer
    EXPECT_NO_THROW(recorder_.record_topk(0, ids_view(ids_)));      // dense
    EXPECT_NO_THROW(recorder_.record_topk(7, ids_view(ids_)));      // out of range
    EXPECT_NO_THROW(recorder_.record_topk(2, ids_view(ids_), 99));  // too many tokens
    EXPECT_NO_THROW(recorder_.record_topk(
        2, TensorView::contiguous(floats.data(), DType::kFloat32, {2, 2})));    // dtype
    EXPECT_NO_THROW(recorder_.record_local_counts(2, counts_view({1, 2}), 5));  // length, rank
    EXPECT_NO_THROW(recorder_.record_topk(2, ids_view(ids_, kTopK, Device::cuda(0))));
    EXPECT_NO_THROW(recorder_.begin_pass(2));  // a pass is open
    EXPECT_NO_THROW(recorder_.end_pass());
    EXPECT_NO_THROW(recorder_.end_pass());
    recorder_.record_topk(2, ids_view(ids_));  // valid, still ignored
  }
  recorder_.end_pass();
  expect_one_pass(reference_layer_counts(1, ids_));
  EXPECT_EQ(recorder_.snapshot().pass_ids, std::vector<std::int64_t>{1});
}

TEST_F(RecorderHooks, DisabledRegionsNest) {
  recorder_.begin_pass(1);
  {
    auto outer = recorder_.disabled_region();
    {
      auto inner = recorder_.disabled_region();
      recorder_.record_topk(1, ids_view(ids_));
    }
    // The outer region is still alive.
    EXPECT_NO_THROW(recorder_.record_topk(0, ids_view(ids_)));
    recorder_.record_topk(1, ids_view(ids_));
  }
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(0, ids_view(ids_)), "dense layer");
  recorder_.record_topk(2, ids_view(ids_));
  recorder_.end_pass();
  expect_one_pass(reference_layer_counts(2, ids_));
}

TEST_F(RecorderHooks, DisabledPassIsNotRecorded) {
  {
    auto region = recorder_.disabled_region();
    recorder_.begin_pass(1);
    recorder_.record_topk(1, ids_view(ids_));
    recorder_.end_pass();
  }
  EXPECT_EQ(recorder_.snapshot().num_passes, 0);
}

// ---- control ----

TEST(RecorderControl, StartsStoppedAndRecordsNothingUntilStarted) {
  CpuRecorder recorder(test_topology());
  const std::vector<std::int32_t> ids = {0, 1};
  EXPECT_FALSE(recorder.is_recording());
  recorder.begin_pass(1);
  recorder.record_topk(1, ids_view(ids));
  recorder.end_pass();
  EXPECT_EQ(recorder.snapshot().num_passes, 0);
  EXPECT_EQ(recorder.snapshot().window_size(), 0);
  recorder.start();
  EXPECT_TRUE(recorder.is_recording());
  recorder.begin_pass(2);
  recorder.record_topk(1, ids_view(ids));
  recorder.end_pass();
  EXPECT_EQ(recorder.snapshot().pass_ids, std::vector<std::int64_t>{2});
}

TEST(RecorderControl, StopKeepsResetClearsStartClears) {
  CpuRecorder recorder(test_topology());
  const std::vector<std::int32_t> ids = {0, 9};
  auto run_pass = [&](std::int64_t id) {
    recorder.begin_pass(id);
    recorder.record_topk(1, ids_view(ids));
    recorder.end_pass();
  };
  recorder.start();
  run_pass(1);
  recorder.stop();
  EXPECT_FALSE(recorder.is_recording());
  run_pass(2);
  Snapshot snapshot = recorder.snapshot();
  EXPECT_EQ(snapshot.pass_ids, std::vector<std::int64_t>{1});
  EXPECT_EQ(snapshot.dropped_ids, 1);
  recorder.reset();  // clears, stays stopped
  EXPECT_FALSE(recorder.is_recording());
  snapshot = recorder.snapshot();
  EXPECT_EQ(snapshot.num_passes, 0);
  EXPECT_EQ(snapshot.dropped_ids, 0);
  EXPECT_TRUE(snapshot.pass_ids.empty());
  recorder.start();
  run_pass(3);
  run_pass(4);
  recorder.reset();  // clears, stays recording
  EXPECT_TRUE(recorder.is_recording());
  run_pass(5);
  EXPECT_EQ(recorder.snapshot().pass_ids, std::vector<std::int64_t>{5});
  recorder.start();  // clears again
  EXPECT_EQ(recorder.snapshot().num_passes, 0);
}

TEST(RecorderControl, ControlCallInsideAPassDiscardsThatPass) {
  CpuRecorder recorder(test_topology());
  const std::vector<std::int32_t> ids = {0, 1};
  recorder.start();
  for (int control = 0; control < 3; ++control) {
    recorder.begin_pass(control);
    recorder.record_topk(1, ids_view(ids));
    if (control == 0) recorder.reset();
    if (control == 1) recorder.start();
    if (control == 2) {
      recorder.stop();
      recorder.start();
    }
    recorder.end_pass();
    EXPECT_EQ(recorder.snapshot().num_passes, 0) << "control " << control;
  }
  // A snapshot or a placement change inside a pass keeps it.
  recorder.begin_pass(7);
  recorder.record_topk(1, ids_view(ids));
  (void)recorder.snapshot();
  recorder.set_placement(Placement::trivial(kLayers, kPhysical, kLogical, 1));
  recorder.end_pass();
  EXPECT_EQ(recorder.snapshot().pass_ids, std::vector<std::int64_t>{7});
}

TEST(RecorderControl, InvalidTopologyOrOptionsAreRejected) {
  ModelTopology topology = test_topology();
  topology.ep_size = 3;
  EXPECT_MOESTAT_ERROR(CpuRecorder{topology}, "divisible by ep_size (3)");
  RecorderOptions options;
  options.window_size = 0;
  EXPECT_MOESTAT_ERROR((CpuRecorder{test_topology(), options}), "window_size must be positive");
}

TEST(RecorderControl, AccessorsReturnWhatWasGiven) {
  RecorderOptions options;
  options.mode = RecordMode::kDecayed;
  options.decay = 0.25;
  const CpuRecorder recorder(test_topology(), options);
  EXPECT_EQ(recorder.topology(), test_topology());
  EXPECT_EQ(recorder.options().mode, RecordMode::kDecayed);
  EXPECT_DOUBLE_EQ(recorder.options().decay, 0.25);
}

// ---- hand-computed examples per mode ----

TEST(RecorderExamples, StatCountsValidRowsAndTalliesDroppedIds) {
  CpuRecorder recorder(test_topology(), with_mode(RecordMode::kStat));
  recorder.start();
  // Row 3 is padding of a graph batch: only 3 rows are valid.
  const std::vector<std::int32_t> ids = {0, 1, 1, -1, 9, 7, 3, 3};
  recorder.begin_pass(42);
  recorder.record_topk(1, ids_view(ids), 3);
  recorder.end_pass();
  const Snapshot snapshot = recorder.snapshot();
  EXPECT_EQ(snapshot.mode, RecordMode::kStat);
  EXPECT_FALSE(snapshot.approximate);
  EXPECT_EQ(snapshot.num_layers, kLayers);
  EXPECT_EQ(snapshot.num_logical_experts, kLogical);
  EXPECT_EQ(snapshot.num_physical_experts, kPhysical);
  EXPECT_EQ(snapshot.top_k, kTopK);
  EXPECT_EQ(snapshot.pass_ids, std::vector<std::int64_t>{42});
  EXPECT_EQ(snapshot.pass_num_tokens, std::vector<std::int64_t>{3});
  EXPECT_EQ(snapshot.placement_versions, std::vector<std::uint64_t>{0});
  std::vector<std::int64_t> physical(kLayers * kPhysical, 0);
  physical[kPhysical + 0] = 1;
  physical[kPhysical + 1] = 2;
  physical[kPhysical + 7] = 1;
  EXPECT_EQ(snapshot.physical_counts, physical);
  std::vector<std::int64_t> logical(kLayers * kLogical, 0);
  logical[kLogical + 0] = 1;
  logical[kLogical + 1] = 2;
  logical[kLogical + 3] = 1;
  EXPECT_EQ(snapshot.logical_counts, logical);
  EXPECT_EQ(snapshot.dropped_ids, 1);
  EXPECT_EQ(snapshot.num_passes, 1);
  EXPECT_EQ(snapshot.logical_totals(), logical);
  EXPECT_EQ(snapshot.physical_totals(), physical);
}

TEST(RecorderExamples, StatWindowKeepsTheLastPassesOldestFirst) {
  RecorderOptions options = with_mode(RecordMode::kStat);
  options.window_size = 2;
  CpuRecorder recorder(test_topology(), options);
  recorder.start();
  for (std::int32_t pass = 0; pass < 5; ++pass) {
    const std::vector<std::int32_t> ids = {pass, pass};
    recorder.begin_pass(100 + pass);
    recorder.record_topk(1, ids_view(ids));
    recorder.end_pass();
  }
  const Snapshot snapshot = recorder.snapshot();
  EXPECT_EQ(snapshot.pass_ids, (std::vector<std::int64_t>{103, 104}));
  EXPECT_EQ(snapshot.num_passes, 5);
  EXPECT_EQ(snapshot.physical_counts[kPhysical + 3], 2);
  EXPECT_EQ(snapshot.physical_counts[kLayers * kPhysical + kPhysical + 4], 2);
}

// The window's counts are stored in chunks of 64 passes: windows across several chunks, one
// partly used, wrapped several times (stat) or growing (per_pass), keep each pass's own row.
TEST(RecorderExamples, WindowRowsSurviveStorageChunksAndWrapping) {
  for (const auto& [mode, window, passes] :
       {std::tuple{RecordMode::kStat, std::int64_t{150}, std::int64_t{400}},
        std::tuple{RecordMode::kPerPass, std::int64_t{-1}, std::int64_t{200}}}) {
    RecorderOptions options = with_mode(mode);
    options.window_size = window;
    CpuRecorder recorder(test_topology(), options);
    recorder.start();
    // Pass p: (p % 5) + 1 tokens, each to slots p % 8 and (p + 1) % 8 of layer 1.
    const auto slots_of = [](std::int64_t pass) {
      return std::pair{std::int32_t(pass % kPhysical), std::int32_t((pass + 1) % kPhysical)};
    };
    for (std::int64_t pass = 0; pass < passes; ++pass) {
      const auto [first, second] = slots_of(pass);
      std::vector<std::int32_t> ids;
      for (std::int64_t t = 0; t <= pass % 5; ++t) ids.insert(ids.end(), {first, second});
      recorder.begin_pass(1000 + pass);
      recorder.record_topk(1, ids_view(ids));
      recorder.end_pass();
    }
    const Snapshot snapshot = recorder.snapshot();
    const std::int64_t kept = window > 0 ? window : passes;
    ASSERT_EQ(snapshot.window_size(), kept);
    for (std::int64_t i = 0; i < kept; ++i) {
      const std::int64_t pass = passes - kept + i;
      ASSERT_EQ(snapshot.pass_ids[std::size_t(i)], 1000 + pass);
      std::vector<std::int64_t> expected(std::size_t(kLayers * kPhysical), 0);
      const auto [first, second] = slots_of(pass);
      expected[std::size_t(kPhysical + first)] += pass % 5 + 1;
      expected[std::size_t(kPhysical + second)] += pass % 5 + 1;
      const auto row = snapshot.physical_counts.begin() + i * kLayers * kPhysical;
      ASSERT_EQ(std::vector<std::int64_t>(row, row + kLayers * kPhysical), expected)
          << "pass " << pass;
    }
  }
}

TEST(RecorderExamples, StatApproxAddsRankCounts) {
  CpuRecorder recorder(test_topology(), with_mode(RecordMode::kStatApprox));
  recorder.start();
  const std::vector<std::int64_t> counts = {1, 2, 3, 4, 99};
  recorder.begin_pass(1);
  recorder.record_local_counts(1, counts_view(counts), 1);
  recorder.end_pass();
  const Snapshot snapshot = recorder.snapshot();
  EXPECT_TRUE(snapshot.approximate);
  EXPECT_EQ(snapshot.mode, RecordMode::kStatApprox);
  std::vector<std::int64_t> physical(kLayers * kPhysical, 0);
  for (int j = 0; j < 4; ++j) physical[std::size_t(kPhysical + 4 + j)] = j + 1;
  EXPECT_EQ(snapshot.physical_counts, physical);
  EXPECT_EQ(snapshot.logical_counts, reference_trivial_logical(physical));
}

TEST(RecorderExamples, PerPassIgnoresWindowSize) {
  RecorderOptions options = with_mode(RecordMode::kPerPass);
  options.window_size = 1;
  CpuRecorder recorder(test_topology(), options);
  recorder.start();
  for (int pass = 0; pass < 3; ++pass) {
    recorder.begin_pass(pass);
    recorder.end_pass();
  }
  EXPECT_EQ(recorder.snapshot().pass_ids, (std::vector<std::int64_t>{0, 1, 2}));
}

TEST(RecorderExamples, PerTokenAppendsCallsAndFillsMissingLayers) {
  RecorderOptions options = with_mode(RecordMode::kPerToken);
  options.per_token_capacity = 4;
  CpuRecorder recorder(test_topology(), options);
  recorder.start();
  const std::vector<std::int32_t> first = {0, 1, 2, -1};  // 2 tokens
  const std::vector<std::int32_t> second = {3, 8};        // 1 token; 8 >= P is dropped
  const std::vector<std::int32_t> other = {5, 6};
  recorder.begin_pass(1);
  recorder.record_topk(1, ids_view(first));
  recorder.record_topk(1, ids_view(second));
  recorder.record_topk(2, ids_view(other));
  recorder.end_pass();
  recorder.begin_pass(2);
  recorder.record_topk(3, ids_view(first));  // only the first of its two tokens fits
  recorder.end_pass();
  const Snapshot snapshot = recorder.snapshot();
  EXPECT_EQ(snapshot.token_pass_ids, (std::vector<std::int64_t>{1, 1, 1, 2}));
  EXPECT_EQ(snapshot.token_placement_versions, std::vector<std::uint64_t>(4, 0));
  // [N=4, L=4, k=2]; dense layer 0 and unrecorded layers are -1.
  const std::vector<std::int32_t> expected = {
      -1, -1, 0,  1,  5,  6,  -1, -1,  // pass 1 token 0
      -1, -1, 2,  -1, -1, -1, -1, -1,  // pass 1 token 1
      -1, -1, 3,  -1, -1, -1, -1, -1,  // pass 1 token 2 (second call)
      -1, -1, -1, -1, -1, -1, 0,  1,   // pass 2 token 0
  };
  EXPECT_EQ(snapshot.token_physical_ids, expected);
  std::vector<std::int32_t> logical = expected;
  for (auto& id : logical) id = id < 0 ? -1 : id % kLogical;
  EXPECT_EQ(snapshot.token_logical_ids, logical);
  EXPECT_EQ(snapshot.dropped_tokens, 1);
  EXPECT_EQ(snapshot.dropped_ids, 1);
  EXPECT_EQ(snapshot.num_passes, 2);
  EXPECT_TRUE(snapshot.pass_ids.empty());
}

TEST(RecorderExamples, PerTokenCallWithoutValidTokensRecordsNoToken) {
  // The first call of a fresh recorder has no valid token (a fully padded batch): nothing is
  // traced, and nothing may be computed from the not yet allocated trace (clang's UBSan
  // flags offsetting its null pointer).
  CpuRecorder recorder(test_topology(), with_mode(RecordMode::kPerToken));
  recorder.start();
  const std::vector<std::int32_t> ids = {0, 1};
  recorder.begin_pass(1);
  recorder.record_topk(3, ids_view(ids), 0);
  recorder.record_topk(2, TensorView::contiguous(nullptr, DType::kInt32, {0, kTopK}));
  recorder.end_pass();
  recorder.begin_pass(2);
  recorder.record_topk(3, ids_view(ids), 0);
  recorder.record_topk(2, ids_view(ids), 1);
  recorder.end_pass();
  const Snapshot snapshot = recorder.snapshot();
  EXPECT_EQ(snapshot.num_passes, 2);
  EXPECT_EQ(snapshot.token_pass_ids, std::vector<std::int64_t>{2});
  EXPECT_EQ(snapshot.token_physical_ids, (std::vector<std::int32_t>{-1, -1, -1, -1, 0, 1, -1, -1}));
}

TEST(RecorderExamples, DecayedAppliesTheFactorBeforeEachPass) {
  RecorderOptions options = with_mode(RecordMode::kDecayed);
  options.decay = 0.5;
  CpuRecorder recorder(test_topology(), options);
  recorder.start();
  const std::vector<std::int32_t> first = {0, 4};  // slots 0 and 4: both expert 0
  const std::vector<std::int32_t> second = {1, 1};
  recorder.begin_pass(1);
  recorder.record_topk(1, ids_view(first));
  recorder.end_pass();
  recorder.begin_pass(2);
  recorder.record_topk(1, ids_view(second));
  recorder.end_pass();
  const Snapshot snapshot = recorder.snapshot();
  std::vector<double> physical(kLayers * kPhysical, 0.0);
  physical[kPhysical + 0] = 0.5;
  physical[kPhysical + 4] = 0.5;
  physical[kPhysical + 1] = 2.0;
  EXPECT_EQ(snapshot.decayed_physical_load, physical);
  std::vector<double> logical(kLayers * kLogical, 0.0);
  logical[kLogical + 0] = 1.0;
  logical[kLogical + 1] = 2.0;
  EXPECT_EQ(snapshot.decayed_logical_load, logical);
  EXPECT_TRUE(snapshot.pass_ids.empty());
  EXPECT_EQ(snapshot.num_passes, 2);
}

}  // namespace
}  // namespace moestat
