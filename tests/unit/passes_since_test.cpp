// Recorder::passes_since on the CPU recorder: the rows it returns are those of snapshot() for
// the same arrivals, across the wrap-around of the window ring, a placement change, passes
// that left the window (missed) and restarts; modes without a window are refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <moestat/record/cpu_recorder.hpp>
#include <random>
#include <vector>

#include "unit/expect_error.hpp"
#include "unit/random_passes.hpp"

namespace moestat {
namespace {

using record::CpuRecorder;

using namespace test::random_passes;

/// Snapshot rows first_row .. end as a PassesSince, header and tallies from `passes`: the
/// expectation for a read whose first row is window row `first_row`.
PassesSince rows_of(const Snapshot& snapshot, std::int64_t first_row, const PassesSince& passes) {
  PassesSince expected = passes;
  const std::int64_t physical = kLayers * kSlots, logical = kLayers * kExperts;
  const auto from = std::ptrdiff_t(first_row);
  expected.pass_ids.assign(snapshot.pass_ids.begin() + from, snapshot.pass_ids.end());
  expected.placement_versions.assign(snapshot.placement_versions.begin() + from,
                                     snapshot.placement_versions.end());
  expected.pass_num_tokens.assign(snapshot.pass_num_tokens.begin() + from,
                                  snapshot.pass_num_tokens.end());
  expected.physical_counts.assign(snapshot.physical_counts.begin() + from * physical,
                                  snapshot.physical_counts.end());
  expected.logical_counts.assign(snapshot.logical_counts.begin() + from * logical,
                                 snapshot.logical_counts.end());
  expected.num_passes = snapshot.num_passes;
  expected.dropped_ids = snapshot.dropped_ids;
  expected.dropped_passes = snapshot.dropped_passes;
  return expected;
}

class PassesSinceTest : public ::testing::Test {
 protected:
  PassesSinceTest() : recorder_(topology(), {.mode = RecordMode::kStat, .window_size = 5}) {
    recorder_.start();
  }
  CpuRecorder recorder_;
  std::mt19937_64 rng_{5};
};

TEST_F(PassesSinceTest, ReturnsTheSnapshotRowsOfTheNewPassesAcrossTheRingsWrapAround) {
  const PassesSince empty = recorder_.passes_since(0, 0);
  EXPECT_EQ(empty.size(), 0);
  EXPECT_EQ(empty.next_arrival(), 0);
  PassesSince passes = empty;
  std::int64_t pass_id = 100;
  // Reads after 3, 2, 4, 0 and 5 new passes: the ring of 5 wraps several times, and the
  // placement changes half-way, so logical counts come from each pass's own placement.
  for (const std::int64_t new_passes : {3, 2, 4, 0, 5}) {
    SCOPED_TRACE(new_passes);
    if (pass_id == 105) {
      // Layer 1's slots hold other experts than under the trivial placement.
      recorder_.set_placement(Placement(kLayers, kSlots, kExperts,
                                        {0, 1, 2, 3, 0, 1, 3, 2, 1, 0, 1, 0, 0, 1, 2, 3, 0, 1}, 1));
    }
    for (std::int64_t i = 0; i < new_passes; ++i) run_pass(recorder_, rng_, pass_id++, 1 + i);
    const std::int64_t asked = passes.next_arrival();
    passes = recorder_.passes_since(passes.generation, asked);
    const Snapshot snapshot = recorder_.snapshot();
    EXPECT_EQ(passes.first_arrival, asked);
    EXPECT_EQ(passes.missed_passes, 0);
    EXPECT_EQ(passes.size(), new_passes);
    EXPECT_EQ(passes.next_arrival(), snapshot.num_passes);
    EXPECT_EQ(passes, rows_of(snapshot, snapshot.window_size() - new_passes, passes));
  }
  EXPECT_GT(passes.dropped_ids, 0);
  // An older arrival still in the window reads from there on.
  const PassesSince again = recorder_.passes_since(passes.generation, 11);
  EXPECT_EQ(again.size(), 3);
  EXPECT_EQ(again, rows_of(recorder_.snapshot(), 2, again));
}

TEST_F(PassesSinceTest, CountsPassesThatLeftTheWindowAsMissed) {
  for (std::int64_t pass = 0; pass < 2; ++pass) run_pass(recorder_, rng_, pass, 2);
  const PassesSince first = recorder_.passes_since(0, 0);
  ASSERT_EQ(first.size(), 2);
  for (std::int64_t pass = 2; pass < 10; ++pass) run_pass(recorder_, rng_, pass, 3);
  // Arrivals 2 .. 9 are new; the window of 5 keeps 5 .. 9.
  const PassesSince passes = recorder_.passes_since(first.generation, first.next_arrival());
  EXPECT_EQ(passes.first_arrival, 5);
  EXPECT_EQ(passes.missed_passes, 3);
  EXPECT_EQ(passes.pass_ids, (std::vector<std::int64_t>{5, 6, 7, 8, 9}));
  EXPECT_EQ(passes, rows_of(recorder_.snapshot(), 0, passes));
}

TEST_F(PassesSinceTest, ARestartBeginsANewGenerationReadFromItsFirstPass) {
  for (std::int64_t pass = 0; pass < 4; ++pass) run_pass(recorder_, rng_, pass, 2);
  const PassesSince before = recorder_.passes_since(0, 0);
  ASSERT_EQ(before.next_arrival(), 4);
  for (const bool by_start : {true, false}) {
    SCOPED_TRACE(by_start ? "start" : "reset");
    const PassesSince last = recorder_.passes_since(0, 0);
    if (by_start) {
      recorder_.start();
    } else {
      recorder_.reset();
    }
    run_pass(recorder_, rng_, 50, 3);
    const PassesSince passes = recorder_.passes_since(last.generation, last.next_arrival());
    EXPECT_NE(passes.generation, last.generation);
    EXPECT_EQ(passes.first_arrival, 0);
    EXPECT_EQ(passes.missed_passes, 0);
    EXPECT_EQ(passes.pass_ids, std::vector<std::int64_t>{50});
    EXPECT_EQ(passes.num_passes, 1);
    EXPECT_EQ(passes, rows_of(recorder_.snapshot(), 0, passes));
  }
  // stop() keeps what was recorded: the generation stays.
  const PassesSince kept = recorder_.passes_since(0, 0);
  recorder_.stop();
  EXPECT_EQ(recorder_.passes_since(0, 0).generation, kept.generation);
}

TEST_F(PassesSinceTest, RefusesArrivalsNotYetReachedAndModesWithoutAWindow) {
  run_pass(recorder_, rng_, 0, 2);
  const std::uint64_t generation = recorder_.passes_since(0, 0).generation;
  EXPECT_EQ(recorder_.passes_since(generation, 1).size(), 0);
  EXPECT_MOESTAT_ERROR(recorder_.passes_since(generation, 2),
                       "arrival 2 is outside the 1 passes that reached the window");
  EXPECT_MOESTAT_ERROR(recorder_.passes_since(generation, -1), "arrival -1 is outside");
  CpuRecorder decayed(topology(), {.mode = RecordMode::kDecayed});
  EXPECT_MOESTAT_ERROR(decayed.passes_since(0, 0),
                       "keeps passes (stat, stat_approx or per_pass), not decayed");
}

TEST(PassesSinceUnbounded, PerPassModeReadsEveryNewPass) {
  CpuRecorder recorder(topology(), {.mode = RecordMode::kPerPass});
  recorder.start();
  std::mt19937_64 rng(9);
  PassesSince passes;
  for (const std::int64_t new_passes : {4, 7}) {
    for (std::int64_t i = 0; i < new_passes; ++i) run_pass(recorder, rng, i, 2);
    passes = recorder.passes_since(passes.generation, passes.next_arrival());
    const Snapshot snapshot = recorder.snapshot();
    EXPECT_EQ(passes.size(), new_passes);
    EXPECT_EQ(passes, rows_of(snapshot, snapshot.window_size() - new_passes, passes));
  }
}

}  // namespace
}  // namespace moestat
