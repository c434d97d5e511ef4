// What a recorder hands out: a consistent copy of everything recorded so far.
#pragma once

#include <cstdint>
#include <moestat/pass_rows.hpp>
#include <moestat/record_mode.hpp>
#include <span>
#include <vector>

namespace moestat {

/// A self-contained copy of a recorder's state, taken between passes (never half a pass).
/// Arrays are row-major `std::vector`s; the comment on each field gives its shape.
/// Logical ids are derived from physical ones with the placement in force when each pass
/// was recorded (`placement_versions`), never with whatever placement is current.
/// Pass-based modes (stat, stat_approx, per_pass) keep one row per pass, oldest first: the
/// W entries of PassRows and the counts below. The tallies (RecordTallies) cover every mode.
struct Snapshot : PassRows, RecordTallies {
  RecordMode mode = RecordMode::kStat;
  bool approximate = false;  ///< true for stat_approx (DeepEP normal counts may be padded).
  std::int64_t num_layers = 0;
  std::int64_t num_logical_experts = 0;
  std::int64_t num_physical_experts = 0;
  std::int64_t top_k = 0;

  // Pass-based modes: the counts of the W passes of PassRows.
  std::vector<std::int64_t> logical_counts;   ///< [W, L, E] token assignments.
  std::vector<std::int64_t> physical_counts;  ///< [W, L, P] token assignments.

  // Decayed mode: load = decay * load + pass_count after every recorded pass.
  std::vector<double> decayed_logical_load;   ///< [L, E]
  std::vector<double> decayed_physical_load;  ///< [L, P]

  // Per-token mode: one row per kept token, in recording order.
  std::vector<std::int64_t> token_pass_ids;             ///< [N] pass the token belongs to.
  std::vector<std::uint64_t> token_placement_versions;  ///< [N]
  /// [N, L, top_k] physical ids; -1 where the layer is dense, the layer was not recorded,
  /// the entry was padding, or the id was out of range (and tallied in dropped_ids).
  std::vector<std::int32_t> token_physical_ids;
  std::vector<std::int32_t> token_logical_ids;  ///< [N, L, top_k], -1 as above.

  /// Rows of the pass window (W).
  std::int64_t window_size() const noexcept { return std::int64_t(pass_ids.size()); }
  /// Kept tokens (N).
  std::int64_t num_tokens() const noexcept { return std::int64_t(token_pass_ids.size()); }

  /// [L, E] logical counts summed over the window (or over kept tokens in per-token mode).
  /// moestat::Error "... overflows int64" when the sum of every count does not fit, so that
  /// any sum of these totals fits too (the same holds for physical_totals).
  std::vector<std::int64_t> logical_totals() const;
  /// [L, P] physical counts summed likewise.
  std::vector<std::int64_t> physical_totals() const;

  friend bool operator==(const Snapshot&, const Snapshot&) = default;
};

/// The passes that reached a recorder's pass window from a given arrival on, for a reader
/// that follows a running recorder (Recorder::passes_since) at a cost proportional to the new
/// passes (ArrivalRange: how arrivals are numbered). The rows are those of snapshot() for the
/// same arrivals; shapes as in Snapshot, with n rows; the tallies as Snapshot's.
struct PassesSince : PassRows, RecordTallies, ArrivalRange {
  std::int64_t num_layers = 0;
  std::int64_t num_logical_experts = 0;
  std::int64_t num_physical_experts = 0;

  std::vector<std::int64_t> logical_counts;   ///< [n, L, E]
  std::vector<std::int64_t> physical_counts;  ///< [n, L, P]

  /// Rows read (n).
  std::int64_t size() const noexcept { return std::int64_t(pass_ids.size()); }
  /// Arrival number of the next pass: the one to ask for next time.
  std::int64_t next_arrival() const noexcept { return first_arrival + size(); }

  friend bool operator==(const PassesSince&, const PassesSince&) = default;
};

}  // namespace moestat
