// Comparisons of two recorders' snapshots (a backend against the CPU recorder as reference, or
// a recorder against one fed the same passes another way), shared by the CPU and GPU tests.
#pragma once

#include <gtest/gtest.h>

#include <moestat/record_mode.hpp>
#include <moestat/snapshot.hpp>

namespace moestat::test {

/// The fields both backends fill, compared exactly.
inline void expect_same_window(const Snapshot& expected, const Snapshot& actual) {
  EXPECT_EQ(actual.pass_ids, expected.pass_ids);
  EXPECT_EQ(actual.placement_versions, expected.placement_versions);
  EXPECT_EQ(actual.pass_num_tokens, expected.pass_num_tokens);
  EXPECT_EQ(actual.physical_counts, expected.physical_counts);
  EXPECT_EQ(actual.logical_counts, expected.logical_counts);
  EXPECT_EQ(actual.num_passes, expected.num_passes);
  EXPECT_EQ(actual.dropped_ids, expected.dropped_ids);
}

inline void expect_same_decayed(const Snapshot& expected, const Snapshot& actual) {
  ASSERT_EQ(actual.decayed_physical_load.size(), expected.decayed_physical_load.size());
  ASSERT_EQ(actual.decayed_logical_load.size(), expected.decayed_logical_load.size());
  for (std::size_t i = 0; i < expected.decayed_physical_load.size(); ++i) {
    EXPECT_NEAR(actual.decayed_physical_load[i], expected.decayed_physical_load[i],
                1e-9 * (1.0 + expected.decayed_physical_load[i]))
        << "physical " << i;
  }
  for (std::size_t i = 0; i < expected.decayed_logical_load.size(); ++i) {
    EXPECT_NEAR(actual.decayed_logical_load[i], expected.decayed_logical_load[i],
                1e-9 * (1.0 + expected.decayed_logical_load[i]))
        << "logical " << i;
  }
  EXPECT_EQ(actual.num_passes, expected.num_passes);
  EXPECT_EQ(actual.dropped_ids, expected.dropped_ids);
}

/// What `mode` keeps: the decayed sums for `decayed`, the window for every other mode.
inline void expect_same_recording(RecordMode mode, const Snapshot& expected,
                                  const Snapshot& actual) {
  if (mode == RecordMode::kDecayed) {
    expect_same_decayed(expected, actual);
  } else {
    expect_same_window(expected, actual);
  }
}

}  // namespace moestat::test
