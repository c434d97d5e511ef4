// What one rank of a test "engine" records: the same passes on every rank, each rank routing
// its own tokens (data parallel), so the cluster-wide counts are known in advance.
#pragma once

#include <gtest/gtest.h>

#include <moestat/record/cpu_recorder.hpp>
#include <numeric>
#include <random>
#include <vector>

namespace moestat::test {

inline ModelTopology rank_test_topology() {
  ModelTopology topology = ModelTopology::uniform(4, 16, 2);
  topology.num_physical_experts = 20;  // four redundant slots
  return topology;
}

/// Tokens [T, 2] that `rank` routes in pass `pass`: ids in [-1, 21] (so -1 padding and
/// out-of-range ids occur), 3 + rank + pass tokens.
inline std::vector<std::int64_t> rank_pass_ids(int rank, std::int64_t pass) {
  std::mt19937_64 rng(std::uint64_t(1000 * rank + pass));
  std::uniform_int_distribution<std::int64_t> id(-1, 21);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(2 * (3 + rank + pass)));
  for (auto& value : ids) value = id(rng);
  return ids;
}

/// Records `num_passes` passes (ids 0, 1, ...) of the tokens of every rank in `ranks` into
/// one recorder: {rank} is what that rank records, {0, 1, 2} what one recorder seeing the
/// whole cluster's tokens records.
inline Snapshot record_ranks(const std::vector<int>& ranks, RecordMode mode,
                             std::int64_t num_passes) {
  record::CpuRecorder recorder(rank_test_topology(),
                               {.mode = mode, .window_size = -1, .decay = 0.5});
  recorder.start();
  for (std::int64_t pass = 0; pass < num_passes; ++pass) {
    std::vector<std::int64_t> ids;
    for (const int rank : ranks) {
      const std::vector<std::int64_t> mine = rank_pass_ids(rank, pass);
      ids.insert(ids.end(), mine.begin(), mine.end());
    }
    const std::int64_t tokens = std::int64_t(ids.size()) / 2;
    recorder.begin_pass(pass);
    for (std::int64_t layer = 0; layer < 4; ++layer) {
      recorder.record_topk(layer, TensorView::contiguous(ids.data(), DType::kInt64, {tokens, 2}),
                           tokens);
    }
    recorder.end_pass();
  }
  return recorder.snapshot();
}

/// Ranks 0 .. num_ranks - 1.
inline std::vector<int> ranks_below(int num_ranks) {
  std::vector<int> ranks(static_cast<std::size_t>(num_ranks));
  std::iota(ranks.begin(), ranks.end(), 0);
  return ranks;
}

/// Expects `reduced` (one rank's reduction of every rank's recording) to hold what one recorder
/// of all their tokens holds: equal counts, decayed loads equal up to rounding.
inline void expect_cluster_counts(const Snapshot& reduced, const Snapshot& whole) {
  EXPECT_EQ(reduced.logical_counts, whole.logical_counts);
  EXPECT_EQ(reduced.physical_counts, whole.physical_counts);
  EXPECT_EQ(reduced.pass_num_tokens, whole.pass_num_tokens);
  EXPECT_EQ(reduced.dropped_ids, whole.dropped_ids);
  EXPECT_EQ(reduced.pass_ids, whole.pass_ids);
  const auto expect_near = [](const std::vector<double>& got, const std::vector<double>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-9) << i;
  };
  expect_near(reduced.decayed_logical_load, whole.decayed_logical_load);
  expect_near(reduced.decayed_physical_load, whole.decayed_physical_load);
}

/// The per-token physical ids of ranks 0 .. num_ranks - 1 (num_passes passes each), in
/// rank order: what a reduction of their traces holds.
inline std::vector<std::int32_t> traced_ids_in_rank_order(int num_ranks, std::int64_t num_passes) {
  std::vector<std::int32_t> ids;
  for (int rank = 0; rank < num_ranks; ++rank) {
    const Snapshot local = record_ranks({rank}, RecordMode::kPerToken, num_passes);
    ids.insert(ids.end(), local.token_physical_ids.begin(), local.token_physical_ids.end());
  }
  return ids;
}

}  // namespace moestat::test
