// allreduce_snapshot over NCCL, one rank per GPU of this machine (at least two; skipped
// otherwise): the reduced snapshot equals what one recorder seeing every rank's tokens
// records, and ranks that recorded different windows all fail alike.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <moestat/dist/nccl.hpp>
#include <moestat/dist/reduce.hpp>
#include <string>
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

TEST(NcclReduce, ARankThatNeverArrivesAbortsTheOthersAtTheDeadline) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) {
    GTEST_SKIP() << "needs at least two GPUs";
  }
  // Non-blocking communicators, one per GPU; the last rank never reduces.
  constexpr std::chrono::milliseconds kTimeout(2000);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm_t> communicators(static_cast<std::size_t>(devices));
  {
    std::vector<std::jthread> ranks;
    for (int device = 0; device < devices; ++device) {
      ranks.emplace_back([&, device] {
        ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
        communicators[std::size_t(device)] = dist::make_nonblocking_communicator(
            id, devices, device, std::chrono::steady_clock::now() + std::chrono::seconds(60));
      });
    }
  }
  std::vector<std::string> messages(static_cast<std::size_t>(devices));
  std::vector<bool> aborted(static_cast<std::size_t>(devices));
  {
    std::vector<std::jthread> ranks;
    for (int device = 0; device + 1 < devices; ++device) {
      ranks.emplace_back([&, device] {
        ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
        cudaStream_t stream = nullptr;
        ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
        dist::NcclCollective group(communicators[std::size_t(device)], stream);
        const auto start = std::chrono::steady_clock::now();
        try {
          dist::allreduce_snapshot(record_ranks({device}, RecordMode::kStat, 3), group, kTimeout);
        } catch (const Error& error) {
          messages[std::size_t(device)] = error.message();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, 2 * kTimeout) << "rank " << device;
        aborted[std::size_t(device)] = group.aborted();
      });
    }
  }
  for (int device = 0; device + 1 < devices; ++device) {
    EXPECT_TRUE(aborted[std::size_t(device)]) << "rank " << device;
    EXPECT_NE(messages[std::size_t(device)].find("the communicator was aborted"), std::string::npos)
        << messages[std::size_t(device)];
  }
  // The absent rank's communicator is aborted too: it can never complete a collective now.
  ASSERT_EQ(cudaSetDevice(devices - 1), cudaSuccess);
  ncclCommAbort(communicators.back());
}

}  // namespace
}  // namespace moestat::test
