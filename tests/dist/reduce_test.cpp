// allreduce_snapshot over in-process ranks: the cluster-wide snapshot equals what one
// recorder seeing every rank's tokens records, every rank gets it, and ranks that recorded
// different things all fail with the same error.
#include <gtest/gtest.h>

#include <moestat/dist/reduce.hpp>
#include <mutex>

#include "dist/rank_recording.hpp"
#include "dist/thread_collective.hpp"

namespace moestat::test {
namespace {

/// Each of `num_ranks` threads reduces `local(rank)`; returns every rank's result.
std::vector<Snapshot> reduce_on_threads(int num_ranks, const std::function<Snapshot(int)>& local) {
  std::vector<Snapshot> results(static_cast<std::size_t>(num_ranks));
  ThreadGroup group(num_ranks);
  group.run([&](dist::Collective& collective) {
    results[std::size_t(collective.rank())] =
        dist::allreduce_snapshot(local(collective.rank()), collective);
  });
  return results;
}

/// Expects every one of `num_ranks` ranks reducing `local(rank)` to throw the same error, one
/// that contains `needle`.
void expect_every_rank_fails_alike(int num_ranks, const std::function<Snapshot(int)>& local,
                                   std::string_view needle) {
  std::vector<std::string> messages(static_cast<std::size_t>(num_ranks));
  ThreadGroup group(num_ranks);
  group.run([&](dist::Collective& collective) {
    try {
      dist::allreduce_snapshot(local(collective.rank()), collective);
    } catch (const Error& error) {
      messages[std::size_t(collective.rank())] = error.message();
    }
  });
  for (const std::string& message : messages) EXPECT_EQ(message, messages[0]);
  EXPECT_NE(messages[0].find(needle), std::string::npos) << messages[0];
}

/// A stat recording of 3 passes by each rank, `change` applied to rank `rank`'s snapshot.
std::function<Snapshot(int)> with_rank_changed(int changed_rank,
                                               const std::function<void(Snapshot&)>& change) {
  return [=](int rank) {
    Snapshot s = record_ranks({rank}, RecordMode::kStat, 3);
    if (rank == changed_rank) change(s);
    return s;
  };
}

TEST(AllreduceSnapshot, CountsEqualOneRecorderThatSawEveryRanksTokens) {
  for (const RecordMode mode : {RecordMode::kStat, RecordMode::kPerPass}) {
    const Snapshot whole = record_ranks({0, 1, 2}, mode, 5);
    const auto results =
        reduce_on_threads(3, [&](int rank) { return record_ranks({rank}, mode, 5); });
    for (const Snapshot& reduced : results) {
      expect_cluster_counts(reduced, whole);
      EXPECT_GT(reduced.dropped_ids, 0);
      EXPECT_EQ(reduced.num_passes, 5);
      EXPECT_EQ(reduced, results[0]);  // every rank gets the same snapshot
    }
  }
}

TEST(AllreduceSnapshot, DecayedLoadsAddUp) {
  const Snapshot whole = record_ranks({0, 1, 2}, RecordMode::kDecayed, 6);
  const auto results =
      reduce_on_threads(3, [](int rank) { return record_ranks({rank}, RecordMode::kDecayed, 6); });
  EXPECT_FALSE(whole.decayed_logical_load.empty());
  for (const Snapshot& reduced : results) expect_cluster_counts(reduced, whole);
}

TEST(AllreduceSnapshot, PerTokenTracesAreConcatenatedInRankOrder) {
  const std::vector<Snapshot> locals{record_ranks({0}, RecordMode::kPerToken, 3),
                                     record_ranks({1}, RecordMode::kPerToken, 3),
                                     record_ranks({2}, RecordMode::kPerToken, 3)};
  const auto results = reduce_on_threads(3, [&](int rank) { return locals[std::size_t(rank)]; });
  std::vector<std::int32_t> physical, logical;
  std::vector<std::int64_t> pass_ids;
  for (const Snapshot& local : locals) {
    physical.insert(physical.end(), local.token_physical_ids.begin(),
                    local.token_physical_ids.end());
    logical.insert(logical.end(), local.token_logical_ids.begin(), local.token_logical_ids.end());
    pass_ids.insert(pass_ids.end(), local.token_pass_ids.begin(), local.token_pass_ids.end());
  }
  for (const Snapshot& reduced : results) {
    EXPECT_EQ(reduced.token_physical_ids, physical);
    EXPECT_EQ(reduced.token_logical_ids, logical);
    EXPECT_EQ(reduced.token_pass_ids, pass_ids);
    EXPECT_EQ(reduced.token_placement_versions.size(), pass_ids.size());
    EXPECT_EQ(reduced.num_tokens(),
              locals[0].num_tokens() + locals[1].num_tokens() + locals[2].num_tokens());
  }
}

TEST(AllreduceSnapshot, OneRankIsItsOwnSnapshot) {
  const Snapshot local = record_ranks({0}, RecordMode::kStat, 4);
  EXPECT_EQ(reduce_on_threads(1, [&](int) { return local; })[0], local);
}

TEST(AllreduceSnapshot, RanksWithDifferentWindowsAllFailNamingTheRank) {
  // Rank 2 snapshots one pass later than the others.
  expect_every_rank_fails_alike(
      3, [](int rank) { return record_ranks({rank}, RecordMode::kStat, rank == 2 ? 5 : 4); },
      "rank 2 has window (passes) 5 where rank 0 has 4");
}

TEST(AllreduceSnapshot, RanksWithDifferentPassIdsOrModelsAllFail) {
  expect_every_rank_fails_alike(2, with_rank_changed(1, [](Snapshot& s) { s.pass_ids[2] = 99; }),
                                "rank 1's window row 2 has pass id 99 where rank 0's has 2");
  expect_every_rank_fails_alike(
      2, with_rank_changed(1, [](Snapshot& s) { s.placement_versions[0] = 7; }),
      "placement version 7");
  expect_every_rank_fails_alike(
      3, with_rank_changed(1, [](Snapshot& s) { s.num_physical_experts = 24; }),
      "rank 1 has physical experts (P) 24 where rank 0 has 20");
  // A rank whose arrays are not the others' lengths fails everywhere before any sum.
  expect_every_rank_fails_alike(
      3, with_rank_changed(2, [](Snapshot& s) { s.physical_counts.pop_back(); }),
      "rank 2 has physical counts 239 where rank 0 has 240");
  expect_every_rank_fails_alike(
      2,
      [](int rank) {
        return record_ranks({rank}, rank == 0 ? RecordMode::kStat : RecordMode::kPerPass, 3);
      },
      "record mode");
}

}  // namespace
}  // namespace moestat::test
