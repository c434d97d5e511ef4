// Host-side store of committed passes, shared by the recorder backends. Not thread-safe:
// the owning recorder serialises access with its control mutex.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <moestat/placement.hpp>
#include <moestat/record_mode.hpp>
#include <moestat/snapshot.hpp>
#include <moestat/topology.hpp>
#include <span>
#include <vector>

namespace moestat::detail {

/// One finished pass as a backend hands it over.
struct PassRecord {
  std::int64_t pass_id = 0;
  std::int64_t num_tokens = 0;
  /// [L, P] counts; row l starts at physical_counts[l * row_stride].
  std::span<const std::int64_t> physical_counts;
  std::int64_t row_stride = 0;
  std::int64_t dropped_ids = 0;
  /// Per-token mode: [num_trace_tokens, L, top_k] physical ids, -1 = none.
  std::span<const std::int32_t> trace_ids;
  std::int64_t num_trace_tokens = 0;
};

/// Keeps what the mode asks for: a window ring of passes, a decayed load, or a bounded
/// per-token buffer; plus tallies and every placement a kept pass refers to.
class PassAccumulator {
 public:
  PassAccumulator(const ModelTopology& topology, const RecorderOptions& options);

  void commit(const PassRecord& pass);
  /// Forgets every pass and tally; keeps the current placement.
  void clear();
  /// `placement` must already match the topology; its version must exceed the current one.
  void set_placement(const Placement& placement);
  Snapshot snapshot() const;
  /// Recorder::passes_since for the window; the generation changes with each clear().
  PassesSince passes_since(std::uint64_t generation, std::int64_t first_arrival) const;

 private:
  const Placement& placement(std::uint64_t version) const { return placements_.at(version); }
  const Placement& current_placement() const { return placements_.rbegin()->second; }
  /// Index of the i-th oldest window row in storage.
  std::int64_t window_row(std::int64_t i) const;
  /// Appends window rows first .. first + count - 1 (oldest = 0) to a Snapshot or
  /// PassesSince, logical counts resolved.
  template <typename Rows>
  void copy_window_rows(std::int64_t first, std::int64_t count, Rows& out) const;
  void commit_window(const PassRecord& pass);
  void commit_decayed(const PassRecord& pass);
  void commit_tokens(const PassRecord& pass);
  void forget_unreferenced_placements();

  RecordMode mode_;
  std::int64_t num_layers_, num_logical_, num_physical_, top_k_;
  std::int64_t window_capacity_;  // -1: unbounded
  double decay_;
  std::int64_t token_capacity_;

  std::map<std::uint64_t, Placement> placements_;  // every version a kept pass refers to

  /// Storage row `row`'s [L, P] counts.
  std::int64_t* window_counts(std::int64_t row) const;

  // Window ring: rows in storage order; once full, next_row_ is the oldest. The counts are
  // kept in chunks of kWindowChunkRows rows, allocated as the window fills, so that growing
  // never moves it: one vector doubled and copied the whole window inside end_pass, on the
  // engine's forward thread (a 256-pass copy stalled a pass for milliseconds at a small
  // model's shape; a DeepSeek-V3 row is 140 KiB).
  static constexpr std::int64_t kWindowChunkRows = 64;
  std::vector<std::unique_ptr<std::int64_t[]>> window_chunks_;  // each [kWindowChunkRows, L, P]
  std::vector<std::int64_t> window_pass_ids_;
  std::vector<std::int64_t> window_num_tokens_;
  std::vector<std::uint64_t> window_versions_;
  std::int64_t next_row_ = 0;

  std::vector<double> decayed_physical_;  // [L, P]
  std::vector<double> decayed_logical_;   // [L, E]

  std::vector<std::int32_t> token_ids_;  // [token_capacity, L, k], allocated up front
  std::vector<std::int64_t> token_pass_ids_;
  std::vector<std::uint64_t> token_versions_;

  // num_passes: in window modes also the passes that reached the window.
  RecordTallies tallies_;
  std::uint64_t generation_ = 0;
};

}  // namespace moestat::detail
