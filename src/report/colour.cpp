#include "colour.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace moestat::report::detail {
namespace {

// Viridis (matplotlib) at t = 0, 1/8, ..., 1; linear in between is close enough for a
// heatmap and keeps its perceptual ordering.
constexpr Rgb kViridis[] = {{68, 1, 84},    {72, 40, 120},  {62, 74, 137},
                            {49, 104, 142}, {38, 130, 142}, {31, 158, 137},
                            {53, 183, 121}, {109, 205, 89}, {253, 231, 37}};
constexpr Rgb kZero = {232, 232, 232};

}  // namespace

Rgb viridis(double t) {
  t = std::clamp(t, 0.0, 1.0) * double(std::size(kViridis) - 1);
  const auto i = std::min(static_cast<std::size_t>(t), std::size(kViridis) - 2);
  const double f = t - double(i);
  Rgb out{};
  for (std::size_t c = 0; c < 3; ++c) {
    out[c] = static_cast<std::uint8_t>(
        std::lround(double(kViridis[i][c]) * (1 - f) + double(kViridis[i + 1][c]) * f));
  }
  return out;
}

std::string hex(Rgb colour) {
  return fmt::format("#{:02x}{:02x}{:02x}", colour[0], colour[1], colour[2]);
}

LogColourScale::LogColourScale(std::span<const std::int64_t> loads) {
  for (std::int64_t load : loads) {
    if (load <= 0) continue;
    min_ = min_ == 0 ? load : std::min(min_, load);
    max_ = std::max(max_, load);
  }
}

Rgb LogColourScale::operator()(std::int64_t load) const {
  if (load <= 0) return kZero;
  if (max_ == min_) return viridis(1.0);
  return viridis((std::log(double(load)) - std::log(double(min_))) /
                 (std::log(double(max_)) - std::log(double(min_))));
}

}  // namespace moestat::report::detail
