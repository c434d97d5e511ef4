// The parts views of recorded passes share, declared once: what is known of each pass besides
// its counts (PassRows), what a recorder tallies (RecordTallies) and, for the reads that follow
// a running recorder, where a read stands in its arrivals (ArrivalRange). Snapshot,
// PassesSince, GpuLoadsSince, CountWindow and the CUDA recorder's reads of its ring are made
// of them, so a new per-pass field or tally is added here and every view carries it.
#pragma once

#include <cstdint>
#include <vector>

namespace moestat {

/// What is known of each of n passes besides its counts, one entry per pass, oldest first.
/// Every array holds n entries, or none where the source does not say (a counts file
/// without pass metadata).
struct PassRows {
  std::vector<std::int64_t> pass_ids{};             ///< [n] the id given to begin_pass.
  std::vector<std::uint64_t> placement_versions{};  ///< [n] placement in force for the pass.
  std::vector<std::int64_t> pass_num_tokens{};      ///< [n] most valid tokens one layer got.

  /// Appends one pass.
  void push_back(std::int64_t pass_id, std::uint64_t placement_version, std::int64_t num_tokens);
  /// Appends every pass of `other` (each array onto its own, so one the source left empty
  /// stays empty).
  void append(const PassRows& other);
  /// Passes [first, end) of every array that holds them.
  PassRows slice(std::int64_t first, std::int64_t end) const;

  /// The rows of a view made of them, to copy them between views in one assignment.
  PassRows& pass_rows() noexcept { return *this; }
  const PassRows& pass_rows() const noexcept { return *this; }

  friend bool operator==(const PassRows&, const PassRows&) = default;
};

/// What a recorder counted since its latest start() or reset(), kept passes or not.
struct RecordTallies {
  std::int64_t num_passes = 0;      ///< Passes recorded since start(), window or not.
  std::int64_t dropped_ids = 0;     ///< Ids outside [0, P) (other than -1) seen and ignored.
  std::int64_t dropped_tokens = 0;  ///< Per-token mode: tokens that did not fit the ring.
  /// CUDA per_pass mode and unbounded windows: passes lost because the host collector fell
  /// more than a device ring behind. Always 0 on the CPU backend.
  std::int64_t dropped_passes = 0;

  /// The tallies of a view made of them, to copy them between views in one assignment.
  RecordTallies& tallies() noexcept { return *this; }
  const RecordTallies& tallies() const noexcept { return *this; }

  friend bool operator==(const RecordTallies&, const RecordTallies&) = default;
};

/// Where a read that follows a running recorder (Recorder::passes_since, gpu_loads_since)
/// stands. Passes are numbered by their arrival in the pass window, from 0 after each start()
/// or reset() (a pass the recorder dropped, RecordTallies::dropped_passes, never arrived).
struct ArrivalRange {
  /// Names the recorder's data since its latest start() or reset(): changes with each, so a
  /// reader passes it back to continue, and a stale one reads from arrival 0 again.
  std::uint64_t generation = 0;
  /// Arrival number of the first row read.
  std::int64_t first_arrival = 0;
  /// Passes from the arrival asked for (0 in a new generation) on that had left the window
  /// before this read: first_arrival minus that arrival.
  std::int64_t missed_passes = 0;

  /// The range of a view made of it, to copy it between views in one assignment.
  ArrivalRange& arrival_range() noexcept { return *this; }
  const ArrivalRange& arrival_range() const noexcept { return *this; }

  friend bool operator==(const ArrivalRange&, const ArrivalRange&) = default;
};

}  // namespace moestat
