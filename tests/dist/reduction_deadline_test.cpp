// ReductionDeadline and poll_until, which the polling transports (MPI, NCCL) share: a poll
// stops as soon as its operation is done, or after one look once the deadline has passed,
// and a missed deadline is reported in the transports' one wording.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <moestat/dist/reduction_deadline.hpp>
#include <moestat/error.hpp>

namespace moestat::dist {
namespace {

using Clock = std::chrono::steady_clock;

constexpr PollPauses kPauses{.first = std::chrono::microseconds(1),
                             .longest = std::chrono::microseconds(4)};

TEST(PollUntil, StopsAtTheFirstTryThatIsDone) {
  int tries = 0;
  EXPECT_TRUE(poll_until(Clock::time_point::max(), kPauses, [&] { return ++tries == 3; }));
  EXPECT_EQ(tries, 3);
}

TEST(PollUntil, LooksOnceWhenTheDeadlineHasPassed) {
  int tries = 0;
  EXPECT_FALSE(poll_until(Clock::now() - std::chrono::seconds(1), kPauses, [&] {
    ++tries;
    return false;
  }));
  EXPECT_EQ(tries, 1);
  EXPECT_TRUE(poll_until(Clock::now() - std::chrono::seconds(1), kPauses, [] { return true; }));
}

TEST(ReductionDeadline, IsActiveFromStartToEnd) {
  ReductionDeadline deadline(kPauses);
  EXPECT_FALSE(deadline.active());
  const Clock::time_point when = Clock::now() + std::chrono::minutes(2);
  deadline.start(when);
  EXPECT_TRUE(deadline.active());
  EXPECT_EQ(deadline.when(), when);
  deadline.end();
  EXPECT_FALSE(deadline.active());
}

TEST(ReductionDeadline, PollsUntilItsDeadline) {
  ReductionDeadline deadline(kPauses);
  deadline.start(Clock::now() - std::chrono::seconds(1));
  int tries = 0;
  EXPECT_FALSE(deadline.poll([&] {
    ++tries;
    return false;
  }));
  EXPECT_EQ(tries, 1);
}

TEST(ReductionDeadline, AMissedDeadlineNamesTheCallTheTimeAndTheRank) {
  ReductionDeadline deadline(kPauses);
  deadline.start(Clock::now() + std::chrono::minutes(2));
  try {
    deadline.fail_incomplete("MPI_Iallreduce", 3, "one rank stopped taking part");
    FAIL() << "fail_incomplete returned";
  } catch (const Error& error) {
    // The time is what was left when start() ran: 120 s, less the microseconds it took.
    EXPECT_THAT(error.message(),
                testing::MatchesRegex("allreduce_snapshot: MPI_Iallreduce did not complete "
                                      "within 1[0-9.e+]+ s on rank 3: one rank stopped taking "
                                      "part"));
  }
}

}  // namespace
}  // namespace moestat::dist
