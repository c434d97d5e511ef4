// Internal: the heatmap's log colour scale and its colour bar's colours (svg_heatmap.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace moestat::report::detail {

using Rgb = std::array<std::uint8_t, 3>;

/// Maps loads to colours: log scale from the smallest positive load (dark) to the largest
/// (bright), viridis colours; zero loads (dense layers, idle experts) light grey.
class LogColourScale {
 public:
  explicit LogColourScale(std::span<const std::int64_t> loads);
  Rgb operator()(std::int64_t load) const;
  std::int64_t min_positive() const noexcept { return min_; }
  std::int64_t max() const noexcept { return max_; }

 private:
  std::int64_t min_ = 0, max_ = 0;
};

/// The viridis colour at t in [0, 1].
Rgb viridis(double t);
/// "#rrggbb".
std::string hex(Rgb colour);

}  // namespace moestat::report::detail
