// Internal: axis ticks at round numbers and short number labels ("1.2M", not "1213621").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moestat::report::detail {

/// About `target` ticks at 1, 2 or 5 x 10^k steps covering [low, high] (high >= low): the
/// first at or below `low`, the last at or above `high`.
std::vector<double> linear_ticks(double low, double high, int target);

/// Ticks for the positions 0..count-1 of an index axis (layers, experts, GPUs, passes): every
/// 1, 2, 5, 10, 20, ... positions, about `target` of them at most.
std::vector<std::int64_t> index_ticks(std::int64_t count, int target);

/// Ticks of a log axis over [low, high] (0 < low <= high): the powers of ten inside, with 2
/// and 5 times them while that keeps at most `max_count` ticks; never fewer than two (the
/// ends themselves when no round number lies between them).
std::vector<double> log_ticks(double low, double high, int max_count);

/// A number in at most 4 significant characters with an SI suffix: 950, 1.2k, 12k, 1.2M,
/// 5.9M, 3.4G; fractions with up to 2 decimals (0.75, 1.5); no trailing zeros.
std::string short_number(double value);

}  // namespace moestat::report::detail
