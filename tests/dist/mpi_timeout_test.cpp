// allreduce_snapshot with a rank that never arrives (run by ctest under mpiexec with three
// ranks): the last rank leaves MPI before the reduction; the others must end with an error
// naming it, within twice the deadline, instead of waiting forever.
//
// Not a gtest binary: the ranks cannot agree on a result through MPI once one has left, so
// each rank exits with its own status and mpiexec fails if any rank fails.
#include <fmt/format.h>
#include <mpi.h>

#include <chrono>
#include <moestat/dist/mpi.hpp>
#include <moestat/dist/reduce.hpp>
#include <string>

#include "dist/rank_recording.hpp"

namespace {

using moestat::test::record_ranks;

/// The deadline: generous, so that a loaded machine still reaches the reduction in time.
constexpr std::chrono::milliseconds kTimeout(2000);

/// What a waiting rank checks: the reduction fails, naming the missing rank, in time.
int wait_for_the_missing_rank(moestat::dist::MpiCollective& world, int missing) {
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    moestat::dist::allreduce_snapshot(record_ranks({world.rank()}, moestat::RecordMode::kStat, 3),
                                      world, kTimeout);
  } catch (const moestat::Error& error) {
    message = error.message();
  }
  const auto took = std::chrono::steady_clock::now() - start;
  int failures = 0;
  const std::string expected = fmt::format("rank {} did not arrive", missing);
  if (message.find(expected) == std::string::npos) {
    fmt::print(stderr, "rank {}: expected an error with \"{}\", got \"{}\"\n", world.rank(),
               expected, message);
    ++failures;
  }
  if (took >= 2 * kTimeout) {
    fmt::print(stderr, "rank {}: failed after {} ms, not within twice the deadline ({} ms)\n",
               world.rank(), std::chrono::duration_cast<std::chrono::milliseconds>(took).count(),
               2 * kTimeout.count());
    ++failures;
  }
  if (failures == 0) fmt::print("rank {}: {}\n", world.rank(), message);
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int failures = 0;
  {
    moestat::dist::MpiCollective world(MPI_COMM_WORLD);
    if (world.size() < 3) {
      fmt::print(stderr, "run under mpiexec with at least three ranks\n");
      failures = 1;
    } else if (world.rank() != world.size() - 1) {
      failures = wait_for_the_missing_rank(world, world.size() - 1);
    }
    // The last rank goes straight to MPI_Finalize: it exits before the reduction.
  }
  MPI_Finalize();
  return failures == 0 ? 0 : 1;
}
