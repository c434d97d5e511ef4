#include "ticks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>

namespace moestat::report::detail {
namespace {

/// The 1, 2 or 5 x 10^k nearest above `raw`.
double nice_step(double raw) {
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0}) {
    if (factor * magnitude >= raw * (1 - 1e-9)) return factor * magnitude;
  }
  return 10.0 * magnitude;
}

/// `value` with at most `decimals` decimals and no trailing zeros ("1.50" -> "1.5").
std::string trimmed(double value, int decimals) {
  std::string text = fmt::format("{:.{}f}", value, decimals);
  if (text.find('.') != std::string::npos) {
    while (text.back() == '0') text.pop_back();
    if (text.back() == '.') text.pop_back();
  }
  return text == "-0" ? "0" : text;
}

}  // namespace

std::vector<double> linear_ticks(double low, double high, int target) {
  if (!(high > low)) high = low + 1.0;
  const double step = nice_step((high - low) / double(std::max(target, 1)));
  std::vector<double> out;
  const double first = std::floor(low / step + 1e-9) * step;
  for (double tick = first; tick < high + step * (1 - 1e-9); tick += step) {
    // Multiples of the step, not sums of it, so 0.3 stays 0.3.
    out.push_back(std::round(tick / step) * step);
  }
  return out;
}

std::vector<std::int64_t> index_ticks(std::int64_t count, int target) {
  const double raw = double(count - 1) / double(std::max(target, 1));
  const auto step = std::max<std::int64_t>(1, std::llround(nice_step(std::max(raw, 1.0))));
  std::vector<std::int64_t> out;
  for (std::int64_t tick = 0; tick < count; tick += step) out.push_back(tick);
  return out;
}

std::vector<double> log_ticks(double low, double high, int max_count) {
  const auto inside = [&](const std::vector<double>& factors) {
    std::vector<double> out;
    for (double decade = std::pow(10.0, std::floor(std::log10(low))); decade <= high;
         decade *= 10) {
      for (double factor : factors) {
        const double tick = decade * factor;
        if (tick >= low * (1 - 1e-9) && tick <= high * (1 + 1e-9)) out.push_back(tick);
      }
    }
    return out;
  };
  std::vector<double> out = inside({1, 2, 5});
  if (out.size() > std::size_t(max_count)) out = inside({1});
  if (out.size() < 2) out = low == high ? std::vector<double>{low} : std::vector<double>{low, high};
  return out;
}

std::string short_number(double value) {
  const double size = std::abs(value);
  if (size < 10.0) return trimmed(value, 2);
  if (size < 999.5) return trimmed(value, 0);
  constexpr std::array<std::string_view, 5> kSuffixes{"k", "M", "G", "T", "P"};
  double scaled = value;
  std::size_t index = 0;
  for (scaled /= 1000.0; std::abs(scaled) >= 999.5 && index + 1 < kSuffixes.size(); ++index) {
    scaled /= 1000.0;
  }
  // 1.2M and 12M keep 2 significant digits, 120M three.
  return trimmed(scaled, std::abs(scaled) < 10 ? 1 : 0) + std::string(kSuffixes[index]);
}

}  // namespace moestat::report::detail
