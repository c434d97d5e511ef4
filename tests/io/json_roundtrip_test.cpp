// Round trips of every JSON document moestat writes: random snapshots of every mode
// (rapidcheck), recorder snapshots, placements and SGLang logical counts. The writer's output
// is also checked against an independent reading with plain nlohmann-json, and the reader
// against documents built by a naive text writer.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <moestat/io/counts_json.hpp>
#include <moestat/io/document.hpp>
#include <moestat/io/placement_json.hpp>
#include <moestat/io/snapshot_json.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <nlohmann/json.hpp>
#include <numeric>

#include "io/test_support.hpp"

namespace moestat {
namespace {

// ---- Naive references ----

/// Nested JSON array text of `shape` from row-major `values`, by plain recursion.
template <typename T>
std::string naive_nested(const std::vector<T>& values, const std::vector<std::int64_t>& shape,
                         std::size_t depth = 0, std::size_t offset = 0) {
  if (depth == shape.size()) return std::to_string(values[offset]);
  std::size_t stride = 1;
  for (std::size_t d = depth + 1; d < shape.size(); ++d) stride *= std::size_t(shape[d]);
  std::string out = "[";
  for (std::int64_t i = 0; i < shape[depth]; ++i) {
    if (i > 0) out += ", ";
    out += naive_nested(values, shape, depth + 1, offset + std::size_t(i) * stride);
  }
  return out + "]";
}

/// Flattens a nested JSON array of integers (read by nlohmann, not by moestat).
void flatten(const nlohmann::json& value, std::vector<std::int64_t>& out) {
  if (value.is_array()) {
    for (const auto& child : value) flatten(child, out);
  } else {
    out.push_back(value.get<std::int64_t>());
  }
}

// ---- Generators ----

rc::Gen<std::int64_t> gen_count() {
  // Small counts as real files have, and values near the int64 limit to catch lossy paths.
  return rc::gen::oneOf(rc::gen::inRange<std::int64_t>(0, 20),
                        rc::gen::inRange<std::int64_t>(0, std::numeric_limits<std::int64_t>::max()),
                        rc::gen::just(std::numeric_limits<std::int64_t>::max()));
}

rc::Gen<double> gen_load() {
  return rc::gen::oneOf(
      rc::gen::map(rc::gen::arbitrary<double>(),
                   [](double value) { return std::isfinite(value) ? std::fabs(value) : 1.5; }),
      rc::gen::element(0.0, 0.1, 1.0 / 3.0, 0.95, DBL_MIN, DBL_TRUE_MIN, DBL_MAX, 1e300,
                       123456789.123456789));
}

template <typename T>
std::vector<T> gen_vector(std::int64_t size, const rc::Gen<T>& element) {
  return *rc::gen::container<std::vector<T>>(std::size_t(size), element);
}

rc::Gen<Snapshot> gen_snapshot() {
  return rc::gen::exec([] {
    Snapshot s;
    s.mode = *rc::gen::element(RecordMode::kStat, RecordMode::kStatApprox, RecordMode::kPerPass,
                               RecordMode::kPerToken, RecordMode::kDecayed);
    s.approximate = s.mode == RecordMode::kStatApprox;
    s.num_layers = *rc::gen::inRange<std::int64_t>(1, 5);
    s.num_logical_experts = *rc::gen::inRange<std::int64_t>(1, 7);
    s.num_physical_experts = s.num_logical_experts + *rc::gen::inRange<std::int64_t>(0, 4);
    s.top_k = *rc::gen::inRange<std::int64_t>(1, s.num_physical_experts + 1);
    const bool windowed = s.mode == RecordMode::kStat || s.mode == RecordMode::kStatApprox ||
                          s.mode == RecordMode::kPerPass;
    const std::int64_t window = windowed ? *rc::gen::inRange<std::int64_t>(0, 5) : 0;
    s.pass_ids = gen_vector(window, rc::gen::arbitrary<std::int64_t>());
    s.placement_versions = gen_vector(window, rc::gen::arbitrary<std::uint64_t>());
    s.pass_num_tokens = gen_vector(window, gen_count());
    s.logical_counts = gen_vector(window * s.num_layers * s.num_logical_experts, gen_count());
    s.physical_counts = gen_vector(window * s.num_layers * s.num_physical_experts, gen_count());
    if (s.mode == RecordMode::kDecayed) {
      s.decayed_logical_load = gen_vector(s.num_layers * s.num_logical_experts, gen_load());
      s.decayed_physical_load = gen_vector(s.num_layers * s.num_physical_experts, gen_load());
    }
    if (s.mode == RecordMode::kPerToken) {
      const std::int64_t tokens = *rc::gen::inRange<std::int64_t>(0, 5);
      const std::int64_t ids = tokens * s.num_layers * s.top_k;
      s.token_pass_ids = gen_vector(tokens, rc::gen::arbitrary<std::int64_t>());
      s.token_placement_versions = gen_vector(tokens, rc::gen::arbitrary<std::uint64_t>());
      s.token_physical_ids =
          gen_vector(ids, rc::gen::inRange<std::int32_t>(-1, std::int32_t(s.num_physical_experts)));
      s.token_logical_ids =
          gen_vector(ids, rc::gen::inRange<std::int32_t>(-1, std::int32_t(s.num_logical_experts)));
      s.dropped_tokens = *gen_count();
    }
    s.num_passes = window + *rc::gen::inRange<std::int64_t>(0, 1000);
    s.dropped_ids = *gen_count();
    return s;
  });
}

rc::Gen<Placement> gen_placement() {
  return rc::gen::exec([] {
    const auto layers = *rc::gen::inRange<std::int64_t>(1, 5);
    const auto logical = *rc::gen::inRange<std::int64_t>(1, 7);
    const auto physical = logical + *rc::gen::inRange<std::int64_t>(0, 5);
    std::vector<std::int32_t> map;
    for (std::int64_t layer = 0; layer < layers; ++layer) {
      // Every expert once, then random replicas, then shuffled: always a valid placement.
      std::vector<std::int32_t> row(static_cast<std::size_t>(logical));
      std::iota(row.begin(), row.end(), 0);
      for (std::int64_t extra = logical; extra < physical; ++extra) {
        row.push_back(*rc::gen::inRange<std::int32_t>(0, std::int32_t(logical)));
      }
      for (std::size_t i = row.size(); i > 1; --i) {
        std::swap(row[i - 1], row[*rc::gen::inRange<std::size_t>(0, i)]);
      }
      map.insert(map.end(), row.begin(), row.end());
    }
    return Placement(layers, physical, logical, std::move(map),
                     *rc::gen::arbitrary<std::uint64_t>());
  });
}

rc::Gen<CountWindow> gen_logical_counts() {
  return rc::gen::exec([] {
    CountWindow counts;
    counts.has_window_axis = *rc::gen::arbitrary<bool>();
    counts.window_size = counts.has_window_axis ? *rc::gen::inRange<std::int64_t>(1, 5) : 1;
    counts.num_layers = *rc::gen::inRange<std::int64_t>(1, 5);
    counts.num_experts = *rc::gen::inRange<std::int64_t>(1, 7);
    counts.counts =
        gen_vector(counts.window_size * counts.num_layers * counts.num_experts, gen_count());
    return counts;
  });
}

// ---- Properties ----

RC_GTEST_PROP(SnapshotJson, RoundTripsEveryFieldExactly, ()) {
  const Snapshot snapshot = *gen_snapshot();
  const std::string text = io::snapshot_to_json(snapshot);
  const Snapshot back = io::snapshot_from_json(text);
  RC_ASSERT(test::snapshot_difference(snapshot, back) == "");
  // Writing is deterministic: the same snapshot gives the same bytes.
  RC_ASSERT(io::snapshot_to_json(back) == text);
}

RC_GTEST_PROP(SnapshotJson, LogicalCountIsSGLangShapedForPlainJsonReaders, ()) {
  const Snapshot snapshot = *gen_snapshot();
  const auto doc = nlohmann::json::parse(io::snapshot_to_json(snapshot));
  RC_ASSERT(doc.at("format") == "moestat.snapshot");
  std::vector<std::int64_t> flat;
  flatten(doc.at("logical_count"), flat);
  RC_ASSERT(flat == snapshot.logical_counts);
  if (snapshot.window_size() > 0) {
    RC_ASSERT(std::int64_t(doc.at("logical_count").size()) == snapshot.window_size());
    RC_ASSERT(std::int64_t(doc.at("logical_count")[0].size()) == snapshot.num_layers);
    RC_ASSERT(std::int64_t(doc.at("logical_count")[0][0].size()) == snapshot.num_logical_experts);
  }
}

RC_GTEST_PROP(SnapshotJson, DocumentFromJsonDetectsSnapshots, ()) {
  const Snapshot snapshot = *gen_snapshot();
  const io::Document document = io::document_from_json(io::snapshot_to_json(snapshot));
  RC_ASSERT(io::document_kind(document) == io::DocumentKind::kSnapshot);
  RC_ASSERT(test::snapshot_difference(snapshot, std::get<Snapshot>(document)) == "");
}

RC_GTEST_PROP(PlacementJson, RoundTripsTheMap, ()) {
  const Placement placement = *gen_placement();
  const std::string text = io::placement_to_json(placement);
  // E inferred as max id + 1, and given explicitly; the version is the caller's.
  const Placement inferred = io::placement_from_json(text);
  RC_ASSERT(inferred.same_maps(placement));
  RC_ASSERT(inferred.version() == 0u);
  const Placement given =
      io::placement_from_json(text, placement.num_logical_experts(), placement.version());
  RC_ASSERT(given.same_maps(placement));
  RC_ASSERT(given.version() == placement.version());
  // Plain JSON readers see [L][P].
  const auto doc = nlohmann::json::parse(text);
  std::vector<std::int64_t> flat;
  flatten(doc.at("physical_to_logical_map"), flat);
  RC_ASSERT(flat == std::vector<std::int64_t>(placement.physical_to_logical().begin(),
                                              placement.physical_to_logical().end()));
  RC_ASSERT(std::int64_t(doc.at("physical_to_logical_map").size()) == placement.num_layers());
  const io::Document document = io::document_from_json(text);
  RC_ASSERT(io::document_kind(document) == io::DocumentKind::kPlacement);
}

RC_GTEST_PROP(LogicalCountsJson, RoundTrips, ()) {
  const CountWindow counts = *gen_logical_counts();
  const std::string text = io::logical_counts_to_json(counts);
  RC_ASSERT(io::logical_counts_from_json(text) == counts);
  const io::Document document = io::document_from_json(text);
  RC_ASSERT(io::document_kind(document) == io::DocumentKind::kLogicalCounts);
  RC_ASSERT(std::get<CountWindow>(document) == counts);
}

RC_GTEST_PROP(LogicalCountsJson, ReadsNaivelyWrittenFiles, ()) {
  const CountWindow counts = *gen_logical_counts();
  const std::vector<std::int64_t> shape =
      counts.has_window_axis
          ? std::vector<std::int64_t>{counts.window_size, counts.num_layers, counts.num_experts}
          : std::vector<std::int64_t>{counts.num_layers, counts.num_experts};
  // SGLang dumps carry other keys; they are ignored.
  const std::string text =
      "{\"rank\": 0, \"logical_count\": " + naive_nested(counts.counts, shape) +
      ", \"average_utilization_rate_over_window\": null}";
  RC_ASSERT(io::logical_counts_from_json(text) == counts);
}

RC_GTEST_PROP(LogicalCountsJson, TotalsSumTheWindow, ()) {
  CountWindow counts = *gen_logical_counts();
  // Counts small enough that the sums cannot overflow.
  counts.counts = gen_vector(std::int64_t(counts.counts.size()),
                             rc::gen::inRange<std::int64_t>(0, std::int64_t(1) << 40));
  const std::vector<std::int64_t> totals = counts.totals();
  const std::int64_t layer_size = counts.num_layers * counts.num_experts;
  for (std::int64_t i = 0; i < layer_size; ++i) {
    std::int64_t expected = 0;
    for (std::int64_t w = 0; w < counts.window_size; ++w) {
      expected += counts.counts[std::size_t(w * layer_size + i)];
    }
    RC_ASSERT(totals[std::size_t(i)] == expected);
  }
}

// ---- Snapshots taken from the recorder, one per mode ----

class RecorderSnapshotJson : public ::testing::TestWithParam<RecordMode> {};

TEST_P(RecorderSnapshotJson, RoundTrips) {
  ModelTopology topology = ModelTopology::uniform(3, 4, 2);
  topology.moe_layers[1] = false;
  topology.num_physical_experts = 6;
  const RecordMode mode = GetParam();
  record::CpuRecorder recorder(topology, {.mode = mode, .window_size = 3, .decay = 0.9});
  recorder.start();
  const std::vector<std::int32_t> ids = {0, 5, 3, -1, 7, 2, 1, 1};  // 7 is out of range
  const std::vector<std::int32_t> counts = {3, 0, 1, 2, 0, 4};
  for (std::int64_t pass = 0; pass < 5; ++pass) {
    if (pass == 2) {
      recorder.set_placement(Placement(3, 6, 4,
                                       {0, 1, 2, 3, 0, 0, 0, 1, 2, 3, 0, 1,  //
                                        3, 2, 1, 0, 3, 3},
                                       1));
    }
    recorder.begin_pass(100 + pass);
    if (mode == RecordMode::kStatApprox) {
      recorder.record_local_counts(0, TensorView::contiguous(counts.data(), DType::kInt32, {6}), 0);
    } else {
      recorder.record_topk(0, TensorView::contiguous(ids.data(), DType::kInt32, {4, 2}), 3);
      recorder.record_topk(2, TensorView::contiguous(ids.data(), DType::kInt32, {4, 2}));
    }
    recorder.end_pass();
  }
  const Snapshot snapshot = recorder.snapshot();
  const Snapshot back = io::snapshot_from_json(io::snapshot_to_json(snapshot));
  EXPECT_EQ(test::snapshot_difference(snapshot, back), "");
  EXPECT_EQ(back.num_passes, 5);
}

INSTANTIATE_TEST_SUITE_P(EveryMode, RecorderSnapshotJson,
                         ::testing::Values(RecordMode::kStat, RecordMode::kStatApprox,
                                           RecordMode::kPerPass, RecordMode::kPerToken,
                                           RecordMode::kDecayed),
                         [](const auto& mode_info) {
                           return std::string(record_mode_name(mode_info.param));
                         });

TEST(CountWindowOf, TakesTheSnapshotWindowAndWhatItSaysOfEachPass) {
  Snapshot snapshot;
  snapshot.num_layers = 1;
  snapshot.num_logical_experts = 2;
  snapshot.pass_ids = {4, 5};
  snapshot.placement_versions = {0, 7};
  snapshot.pass_num_tokens = {3, 5};
  snapshot.logical_counts = {1, 2, 3, 4};
  const CountWindow counts = count_window_of(snapshot);
  EXPECT_TRUE(counts.has_window_axis);
  EXPECT_EQ(counts.pass_rows.pass_ids, snapshot.pass_ids);
  EXPECT_EQ(counts.pass_rows.placement_versions, snapshot.placement_versions);
  EXPECT_EQ(counts.pass_rows.pass_num_tokens, snapshot.pass_num_tokens);
  EXPECT_EQ(counts.window_size, 2);
  EXPECT_EQ(counts.counts, snapshot.logical_counts);
  EXPECT_EQ(counts.totals(), (std::vector<std::int64_t>{4, 6}));
  snapshot.pass_ids.clear();
  snapshot.placement_versions.clear();
  snapshot.pass_num_tokens.clear();
  test::expect_error([&] { count_window_of(snapshot); }, {"no pass window"});
}

TEST(SnapshotJson, WritesNoWhitespaceInsideRowsAndOneKeyPerLine) {
  Snapshot snapshot;
  snapshot.num_layers = 2;
  snapshot.num_logical_experts = 2;
  snapshot.num_physical_experts = 2;
  snapshot.top_k = 1;
  snapshot.num_passes = 1;
  snapshot.pass_ids = {7};
  snapshot.placement_versions = {0};
  snapshot.pass_num_tokens = {3};
  snapshot.logical_counts = {1, 2, 0, 0};
  snapshot.physical_counts = {1, 2, 0, 0};
  const std::string text = io::snapshot_to_json(snapshot);
  EXPECT_NE(text.find("\n  \"logical_count\": [\n    [\n      [1,2],\n      [0,0]\n    ]\n  ],\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.back(), '\n');
}

}  // namespace
}  // namespace moestat
