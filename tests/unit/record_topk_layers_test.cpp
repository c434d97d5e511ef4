// Recorder::record_topk_layers on the CPU backend (the default, layer by layer): it counts
// what record_topk called for each layer counts, and checks every layer before counting any.
#include <gtest/gtest.h>

#include <cstdint>
#include <moestat/record/cpu_recorder.hpp>
#include <random>
#include <vector>

#include "unit/expect_error.hpp"
#include "unit/snapshot_expectations.hpp"

namespace moestat {
namespace {

using record::CpuRecorder;

constexpr std::int64_t kTopK = 2;

ModelTopology test_topology() {
  ModelTopology topology = ModelTopology::uniform(5, 6, kTopK);
  topology.moe_layers[0] = false;  // a dense first layer, as DeepSeek-V3's
  topology.num_physical_experts = 8;
  topology.validate();
  return topology;
}

/// Ids of one layer: mostly slots, some -1 padding, some out of range.
std::vector<std::int64_t> random_layer_ids(std::mt19937_64& rng, std::int64_t rows) {
  std::uniform_int_distribution<std::int64_t> id(-2, 9);
  std::vector<std::int64_t> ids(std::size_t(rows * kTopK));
  for (auto& value : ids) value = id(rng);
  return ids;
}

TEST(RecordTopkLayers, CountsWhatRecordTopkCountsLayerByLayer) {
  const ModelTopology topology = test_topology();
  for (RecordMode mode : {RecordMode::kStat, RecordMode::kPerPass, RecordMode::kPerToken}) {
    SCOPED_TRACE(std::string(record_mode_name(mode)));
    const RecorderOptions options{.mode = mode, .window_size = 8};
    CpuRecorder one_by_one(topology, options);
    CpuRecorder batched(topology, options);
    one_by_one.start();
    batched.start();
    std::mt19937_64 rng(11);
    for (std::int64_t pass = 0; pass < 6; ++pass) {
      const std::int64_t rows = 1 + pass;
      std::vector<std::vector<std::int64_t>> ids64;
      std::vector<std::vector<std::int32_t>> ids32;
      std::vector<Recorder::LayerTopk> layers;
      for (std::int64_t layer = 1; layer < topology.num_layers; ++layer) {
        ids64.push_back(random_layer_ids(rng, rows));
        ids32.emplace_back(ids64.back().begin(), ids64.back().end());
      }
      for (std::size_t i = 0; i < ids64.size(); ++i) {
        // Odd layers in int32, even in int64: one batch mixes both.
        const bool as_int32 = i % 2 == 1;
        const void* data = as_int32 ? static_cast<const void*>(ids32[i].data())
                                    : static_cast<const void*>(ids64[i].data());
        layers.push_back({std::int64_t(i) + 1,
                          TensorView::contiguous(data, as_int32 ? DType::kInt32 : DType::kInt64,
                                                 {rows, kTopK})});
      }
      const std::int64_t valid_rows = pass % 2 == 0 ? Recorder::kAllTokens : rows - 1;
      one_by_one.begin_pass(pass);
      batched.begin_pass(pass);
      for (const auto& entry : layers)
        one_by_one.record_topk(entry.layer, entry.topk_ids, valid_rows);
      if (pass == 3) {
        // The count as a one-element host tensor.
        const std::int32_t count = std::int32_t(valid_rows);
        batched.record_topk_layers(layers, TensorView::contiguous(&count, DType::kInt32, {1}));
      } else {
        batched.record_topk_layers(layers, valid_rows);
      }
      one_by_one.end_pass();
      batched.end_pass();
    }
    const Snapshot expected = one_by_one.snapshot();
    const Snapshot actual = batched.snapshot();
    test::expect_same_window(expected, actual);
    EXPECT_EQ(actual.token_physical_ids, expected.token_physical_ids);
    EXPECT_GT(expected.dropped_ids, 0);
  }
}

TEST(RecordTopkLayers, ChecksEveryLayerBeforeCountingAny) {
  const ModelTopology topology = test_topology();
  CpuRecorder recorder(topology, {.mode = RecordMode::kStat, .window_size = 4});
  const std::vector<std::int64_t> two_rows{0, 1, 2, 3};
  const std::vector<std::int64_t> one_row{4, 5};
  const TensorView good = TensorView::contiguous(two_rows.data(), DType::kInt64, {2, kTopK});
  const TensorView fewer = TensorView::contiguous(one_row.data(), DType::kInt64, {1, kTopK});
  const TensorView flat = TensorView::contiguous(two_rows.data(), DType::kInt64, {4});
  recorder.start();

  const Recorder::LayerTopk outside_pass[] = {{1, good}};
  EXPECT_MOESTAT_ERROR(recorder.record_topk_layers(outside_pass),
                       "record_topk_layers outside a pass");
  recorder.begin_pass(0);
  const Recorder::LayerTopk dense_last[] = {{1, good}, {2, good}, {0, good}};
  EXPECT_MOESTAT_ERROR(recorder.record_topk_layers(dense_last),
                       "record_topk_layers: layer 0 is a dense layer");
  const Recorder::LayerTopk out_of_range[] = {{1, good}, {5, good}};
  EXPECT_MOESTAT_ERROR(recorder.record_topk_layers(out_of_range),
                       "record_topk_layers: layer 5 out of range [0, 5)");
  const Recorder::LayerTopk not_a_matrix[] = {{1, good}, {2, flat}};
  EXPECT_MOESTAT_ERROR(recorder.record_topk_layers(not_a_matrix), "topk_ids");
  const Recorder::LayerTopk rows_differ[] = {{1, good}, {2, fewer}};
  EXPECT_MOESTAT_ERROR(recorder.record_topk_layers(rows_differ, 2),
                       "record_topk_layers: num_valid_tokens 2 outside [0, 1]");
  const std::int64_t host_count = 2;
  EXPECT_MOESTAT_ERROR(recorder.record_topk_layers(
                           rows_differ, TensorView::contiguous(&host_count, DType::kInt64, {1})),
                       "record_topk_layers: num_valid_tokens 2 outside [0, 1]");
  recorder.record_topk_layers({});  // nothing to count
  recorder.end_pass();

  const Snapshot snapshot = recorder.snapshot();
  ASSERT_EQ(snapshot.num_passes, 1);
  for (std::int64_t count : snapshot.physical_counts) EXPECT_EQ(count, 0);
}

TEST(RecordTopkLayers, IsIgnoredInADisabledRegion) {
  const ModelTopology topology = test_topology();
  CpuRecorder recorder(topology, {.mode = RecordMode::kStat, .window_size = 4});
  const std::vector<std::int64_t> ids{0, 1};
  const Recorder::LayerTopk layers[] = {
      {1, TensorView::contiguous(ids.data(), DType::kInt64, {1, kTopK})}};
  recorder.start();
  recorder.begin_pass(0);
  {
    const DisabledRegion draft = recorder.disabled_region();
    recorder.record_topk_layers(layers);
  }
  recorder.record_topk_layers(layers);
  recorder.end_pass();
  const Snapshot snapshot = recorder.snapshot();
  std::int64_t total = 0;
  for (std::int64_t count : snapshot.physical_counts) total += count;
  EXPECT_EQ(total, 2);
}

}  // namespace
}  // namespace moestat
