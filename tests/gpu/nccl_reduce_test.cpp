// allreduce_snapshot over NCCL, one rank per GPU of this machine (at least two; skipped
// otherwise): the reduced snapshot equals what one recorder seeing every rank's tokens
// records, and ranks that recorded different windows all fail alike.
#include <gtest/gtest.h>

#include <functional>
#include <moestat/dist/nccl.hpp>
#include <moestat/dist/reduce.hpp>
#include <thread>

#include "dist/rank_recording.hpp"

namespace moestat::test {
namespace {

/// Runs `body(collective)` on one thread per GPU, each with its rank's communicator.
void on_every_gpu(const std::function<void(dist::Collective&)>& body) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) {
    GTEST_SKIP() << "needs at least two GPUs";
  }
  std::vector<ncclComm_t> communicators(static_cast<std::size_t>(devices));
  ASSERT_EQ(ncclCommInitAll(communicators.data(), devices, nullptr), ncclSuccess);
  {
    std::vector<std::jthread> ranks;
    for (int device = 0; device < devices; ++device) {
      ranks.emplace_back([&, device] {
        ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
        cudaStream_t stream = nullptr;
        ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
        dist::NcclCollective collective(communicators[std::size_t(device)], stream);
        body(collective);
        cudaStreamDestroy(stream);
      });
    }
  }
  for (ncclComm_t communicator : communicators) ncclCommDestroy(communicator);
}

TEST(NcclReduce, CountsEqualOneRecorderThatSawEveryRanksTokens) {
  on_every_gpu([](dist::Collective& group) {
    for (const RecordMode mode : {RecordMode::kStat, RecordMode::kPerPass, RecordMode::kDecayed}) {
      const Snapshot reduced =
          dist::allreduce_snapshot(record_ranks({group.rank()}, mode, 5), group);
      expect_cluster_counts(reduced, record_ranks(ranks_below(group.size()), mode, 5));
    }
    // Per-token traces: every rank's tokens in rank order (lengths differ by rank).
    const Snapshot traced =
        dist::allreduce_snapshot(record_ranks({group.rank()}, RecordMode::kPerToken, 3), group);
    EXPECT_EQ(traced.token_physical_ids, traced_ids_in_rank_order(group.size(), 3));
  });
}

TEST(NcclReduce, EveryRankFailsAlikeWhenTheWindowsDiffer) {
  on_every_gpu([](dist::Collective& group) {
    const std::int64_t passes = group.rank() == 1 ? 4 : 3;
    std::string message;
    try {
      dist::allreduce_snapshot(record_ranks({group.rank()}, RecordMode::kStat, passes), group);
    } catch (const Error& error) {
      message = error.message();
    }
    EXPECT_NE(message.find("rank 1 has window (passes) 4 where rank 0 has 3"), std::string::npos)
        << message;
  });
}

}  // namespace
}  // namespace moestat::test
