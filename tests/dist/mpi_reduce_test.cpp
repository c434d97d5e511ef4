// allreduce_snapshot over MPI (run by ctest under mpiexec with three ranks): every rank records
// its own tokens, and the reduced snapshot equals what one recorder seeing all of them records.
#include <gtest/gtest.h>

#include <moestat/dist/mpi.hpp>
#include <moestat/dist/reduce.hpp>

#include "dist/rank_recording.hpp"

namespace moestat::test {
namespace {

TEST(MpiReduce, CountsEqualOneRecorderThatSawEveryRanksTokens) {
  dist::MpiCollective world(MPI_COMM_WORLD);
  ASSERT_GE(world.size(), 2) << "run under mpiexec with at least two ranks";
  for (const RecordMode mode : {RecordMode::kStat, RecordMode::kPerPass, RecordMode::kDecayed}) {
    const Snapshot reduced = dist::allreduce_snapshot(record_ranks({world.rank()}, mode, 5), world);
    expect_cluster_counts(reduced, record_ranks(ranks_below(world.size()), mode, 5));
  }
}

TEST(MpiReduce, PerTokenTracesAreConcatenatedInRankOrder) {
  dist::MpiCollective world(MPI_COMM_WORLD);
  const Snapshot reduced =
      dist::allreduce_snapshot(record_ranks({world.rank()}, RecordMode::kPerToken, 3), world);
  EXPECT_EQ(reduced.token_physical_ids, traced_ids_in_rank_order(world.size(), 3));
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
            record_ranks(ranks_below(world.size()), RecordMode::kStat, 2).logical_counts);
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
