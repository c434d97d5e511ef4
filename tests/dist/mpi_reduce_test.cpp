// allreduce_snapshot over MPI (run by ctest under mpiexec with three ranks): every rank records
// its own tokens, and the reduced snapshot equals what one recorder seeing all of them records.
#include <gtest/gtest.h>

#include <moestat/dist/mpi.hpp>
#include <moestat/dist/reduce.hpp>
#include <numeric>

#include "dist/rank_recording.hpp"

namespace moestat::test {
namespace {

std::vector<int> all_ranks(int size) {
  std::vector<int> ranks(static_cast<std::size_t>(size), 0);
  std::iota(ranks.begin(), ranks.end(), 0);
  return ranks;
}

TEST(MpiReduce, CountsEqualOneRecorderThatSawEveryRanksTokens) {
  dist::MpiCollective world(MPI_COMM_WORLD);
  ASSERT_GE(world.size(), 2) << "run under mpiexec with at least two ranks";
  for (const RecordMode mode : {RecordMode::kStat, RecordMode::kPerPass, RecordMode::kDecayed}) {
    const Snapshot reduced = dist::allreduce_snapshot(record_ranks({world.rank()}, mode, 5), world);
    const Snapshot whole = record_ranks(all_ranks(world.size()), mode, 5);
    EXPECT_EQ(reduced.logical_counts, whole.logical_counts);
    EXPECT_EQ(reduced.physical_counts, whole.physical_counts);
    EXPECT_EQ(reduced.pass_num_tokens, whole.pass_num_tokens);
    EXPECT_EQ(reduced.dropped_ids, whole.dropped_ids);
    ASSERT_EQ(reduced.decayed_logical_load.size(), whole.decayed_logical_load.size());
    for (std::size_t i = 0; i < whole.decayed_logical_load.size(); ++i) {
      EXPECT_NEAR(reduced.decayed_logical_load[i], whole.decayed_logical_load[i], 1e-9);
    }
  }
}

TEST(MpiReduce, PerTokenTracesAreConcatenatedInRankOrder) {
  dist::MpiCollective world(MPI_COMM_WORLD);
  const Snapshot reduced =
      dist::allreduce_snapshot(record_ranks({world.rank()}, RecordMode::kPerToken, 3), world);
  std::vector<std::int32_t> physical;
  for (int rank = 0; rank < world.size(); ++rank) {
    const Snapshot local = record_ranks({rank}, RecordMode::kPerToken, 3);
    physical.insert(physical.end(), local.token_physical_ids.begin(),
                    local.token_physical_ids.end());
  }
  EXPECT_EQ(reduced.token_physical_ids, physical);
}

TEST(MpiReduce, EveryRankFailsAlikeWhenTheWindowsDiffer) {
  dist::MpiCollective world(MPI_COMM_WORLD);
  const std::int64_t passes = world.rank() == world.size() - 1 ? 4 : 3;
  std::string message;
  try {
    dist::allreduce_snapshot(record_ranks({world.rank()}, RecordMode::kStat, passes), world);
  } catch (const Error& error) {
    message = error.message();
  }
  EXPECT_NE(message.find(
                fmt::format("rank {} has window (passes) 4 where rank 0 has 3", world.size() - 1)),
            std::string::npos)
      << message;
  // Every rank is still in step: a later reduction works.
  const Snapshot again =
      dist::allreduce_snapshot(record_ranks({world.rank()}, RecordMode::kStat, 2), world);
  EXPECT_EQ(again.logical_counts,
            record_ranks(all_ranks(world.size()), RecordMode::kStat, 2).logical_counts);
}

}  // namespace
}  // namespace moestat::test

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  // Any rank's failure fails the run on every rank, so mpiexec's status tells.
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed;
}
