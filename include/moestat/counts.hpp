// The one offline model of recorded counts: a window of per-pass token assignments to
// logical experts. A recorder's snapshot becomes one (count_window_of), every counts file is
// read into one (io::read_counts), and io writes, plan loads, report draws and the CLI and
// Python take the same type.
#pragma once

#include <cstdint>
#include <moestat/snapshot.hpp>
#include <span>
#include <string_view>
#include <vector>

namespace moestat {

/// Token assignments of every logical expert of every layer over a window of W forward
/// passes, oldest first. Arrays are row-major.
///
/// Counts are exact int64: counts of a file and of a snapshot compare equal, round-trip
/// through every format and sum without rounding (a sum that does not fit is an error).
/// Statistics files may hold fractions instead: SGLang's published statistics and fiddler's
/// `expert_popularity` are JSON numbers, whole in every file seen so far but not bound to be.
/// A whole float ("12.0") is a count. A file with any non-whole entry is read (only where the
/// caller asks, io::Fractions::kKeep, as the planners do) into `fractional_counts`, exactly as
/// written, leaving `counts` empty: planners weigh experts by such loads as by counts, while
/// whatever needs whole counts (totals, writing a file, merging, a report) refuses the window
/// by name rather than round what it cannot represent.
struct CountWindow {
  std::int64_t window_size = 1;  ///< W; 1 for a source without a window axis.
  std::int64_t num_layers = 0;   ///< L, dense layers included.
  std::int64_t num_experts = 0;  ///< E logical experts.
  /// The source kept one row per pass ([W][L][E]); false for an [L][E] file or a summary of
  /// a snapshot that keeps no window, whose one row is a sum over unknown passes.
  bool has_window_axis = false;
  std::vector<std::int64_t> counts{};  ///< [W, L, E] token assignments, >= 0.
  /// [W, L, E] loads of a file with non-whole entries, finite and >= 0; empty otherwise
  /// (then `counts` is empty instead).
  std::vector<double> fractional_counts{};

  /// What the source says about each pass, [W] each; arrays empty where it does not say
  /// (SGLang's stat dumps and JSON files keep no pass metadata). A member, not a base as in
  /// the recorder's views, so that a designated initialiser may leave it out.
  PassRows pass_rows{};

  bool is_fractional() const noexcept { return !fractional_counts.empty(); }
  /// L x E, the size of one pass.
  std::int64_t pass_size() const noexcept { return num_layers * num_experts; }

  /// [L, E] counts summed over the window. moestat::Error "... overflows int64" when the
  /// sum of every count does not fit, so that any sum of these totals fits too; and when the
  /// window is fractional.
  std::vector<std::int64_t> totals() const;
  /// Passes [first, end) of the window, with their metadata.
  CountWindow passes(std::int64_t first, std::int64_t end) const;

  /// moestat::Error naming the first inconsistency: sizes below 1, W != 1 without a window
  /// axis, arrays that do not fill [W, L, E] (or [W]), a negative or non-finite entry
  /// ("NAME[pass][layer][expert] is -2"; `name` is what the caller calls the counts).
  void validate(std::string_view name = "counts") const;
  /// moestat::Error saying where ("NAME[pass][layer][expert] is 2.5") when the window is
  /// fractional, for whatever needs whole counts.
  void require_whole_counts(std::string_view name = "counts") const;

  friend bool operator==(const CountWindow&, const CountWindow&) = default;
};

/// The snapshot's pass window with its pass ids, placement versions and token counts
/// (has_window_axis = true). moestat::Error when the snapshot keeps no pass window
/// (per_token and decayed modes).
CountWindow count_window_of(const Snapshot& snapshot);

}  // namespace moestat
