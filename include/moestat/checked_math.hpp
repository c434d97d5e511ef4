// Integer sums that refuse to overflow. Counts come from files and callers, so a sum of them
// can exceed int64: signed overflow is undefined behaviour, and in practice a wrapped count
// is a wrong count that looks plausible.
#pragma once

#include <cstdint>
#include <moestat/error.hpp>
#include <span>
#include <string_view>

namespace moestat {

/// `a + b`; moestat::Error "<what> overflows int64" when the sum does not fit.
inline std::int64_t checked_add(std::int64_t a, std::int64_t b, std::string_view what) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) [[unlikely]] {
    MOESTAT_FAIL("{} overflows int64", what);
  }
  return sum;
}

/// The sum of `values`, checked as checked_add.
inline std::int64_t checked_sum(std::span<const std::int64_t> values, std::string_view what) {
  std::int64_t sum = 0;
  for (const std::int64_t value : values) sum = checked_add(sum, value, what);
  return sum;
}

}  // namespace moestat
