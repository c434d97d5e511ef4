// Recording modes and their options.
#pragma once

#include <cstdint>
#include <string_view>

namespace moestat {

/// What a recorder keeps (see docs/recording-semantics.md for every rule).
enum class RecordMode : std::uint8_t {
  kStat,        ///< Exact counts of the last W passes (a window ring; W = -1 grows).
  kStatApprox,  ///< Same window, fed by DeepEP normal-dispatch host counts (may be padded).
  kPerPass,     ///< One record per pass, unbounded.
  kPerToken,    ///< Per-token top-k ids of every layer in a bounded buffer.
  kDecayed,     ///< load = decay * load + pass_count.
};

std::string_view record_mode_name(RecordMode mode) noexcept;
/// Parses "stat", "stat_approx", "per_pass", "per_token" or "decayed"; moestat::Error otherwise.
RecordMode parse_record_mode(std::string_view name);

struct RecorderOptions {
  RecordMode mode = RecordMode::kStat;
  /// stat / stat_approx: passes kept (SGLang's buffer_size); -1 keeps every pass.
  std::int64_t window_size = 1000;
  /// decayed: factor applied to the running load before each pass is added, in [0, 1].
  double decay = 0.95;
  /// per_token: tokens kept; allocated up front, later tokens are dropped and counted.
  std::int64_t per_token_capacity = 16384;

  /// Throws moestat::Error naming the bad option.
  void validate() const;
};

}  // namespace moestat
