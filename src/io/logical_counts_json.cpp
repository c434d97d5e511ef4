// SGLang-style `{"logical_count": [L][E] or [W][L][E]}` files.
#include <array>
#include <cmath>
#include <limits>
#include <moestat/checked_math.hpp>
#include <moestat/error.hpp>
#include <moestat/io/json.hpp>

#include "json_support.hpp"
#include "readers.hpp"

namespace moestat::io {
namespace {

void validate(const LogicalCounts& counts) {
  MOESTAT_CHECK(counts.window_size > 0 && counts.num_layers > 0 && counts.num_experts > 0,
                "logical_count must have at least one pass, layer and expert, got W={} L={} E={}",
                counts.window_size, counts.num_layers, counts.num_experts);
  MOESTAT_CHECK(counts.has_window_axis || counts.window_size == 1,
                "logical_count without a window axis must have W = 1, got W={}",
                counts.window_size);
  const std::int64_t expected = counts.window_size * counts.num_layers * counts.num_experts;
  MOESTAT_CHECK(std::int64_t(counts.counts.size()) == expected,
                "logical_count has {} entries, expected W={} x L={} x E={} = {}",
                counts.counts.size(), counts.window_size, counts.num_layers, counts.num_experts,
                expected);
  for (std::size_t i = 0; i < counts.counts.size(); ++i) {
    if (counts.counts[i] >= 0) continue;
    const auto flat = std::int64_t(i);
    const std::int64_t expert = flat % counts.num_experts;
    const std::int64_t layer = flat / counts.num_experts % counts.num_layers;
    const std::int64_t pass = flat / (counts.num_experts * counts.num_layers);
    if (counts.has_window_axis) {
      MOESTAT_FAIL("logical_count[{}][{}][{}] is {}, expected a non-negative count", pass, layer,
                   expert, counts.counts[i]);
    }
    MOESTAT_FAIL("logical_count[{}][{}] is {}, expected a non-negative count", layer, expert,
                 counts.counts[i]);
  }
}

}  // namespace

std::vector<std::int64_t> LogicalCounts::totals() const {
  const std::int64_t layer_size = num_layers * num_experts;
  std::vector<std::int64_t> out(std::size_t(std::max<std::int64_t>(layer_size, 0)), 0);
  // The grand total is checked too: counts are non-negative, so when it fits, every total
  // and every sum of totals a caller makes (a layer's, the file's) fits as well.
  std::int64_t all = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    out[i % out.size()] += counts[i];
    all = checked_add(all, counts[i], "the sum of logical_count");
  }
  return out;
}

std::string logical_counts_to_json(const LogicalCounts& counts) {
  validate(counts);
  detail::OrderedJson doc = detail::OrderedJson::object();
  if (counts.has_window_axis) {
    doc["logical_count"] = detail::to_nested<std::int64_t>(
        counts.counts,
        std::array<std::int64_t, 3>{counts.window_size, counts.num_layers, counts.num_experts});
  } else {
    doc["logical_count"] = detail::to_nested<std::int64_t>(
        counts.counts, std::array<std::int64_t, 2>{counts.num_layers, counts.num_experts});
  }
  return detail::dump_document(doc);
}

LogicalCounts logical_counts_from_json(std::string_view text) {
  return detail::logical_counts_from_document(detail::parse_json(text));
}

LogicalCounts detail::logical_counts_from_document(const Json& doc) {
  detail::require_object(doc, "SGLang counts with \"logical_count\"");
  const detail::Json& value = detail::require_key(doc, "logical_count");
  const int depth = detail::nesting_depth(value);
  MOESTAT_CHECK(!(value.is_array() && value.empty()),
                "logical_count is empty: expected [layers][experts] or [passes][layers][experts]");
  MOESTAT_CHECK(depth == 2 || depth == 3,
                "logical_count has {} levels of nesting, expected [layers][experts] (2) or "
                "[passes][layers][experts] (3)",
                depth);
  LogicalCounts out;
  out.has_window_axis = depth == 3;
  std::vector<std::int64_t> shape(std::size_t(depth), detail::kAnySize);
  constexpr std::array<std::string_view, 3> kNames{"passes", "layers", "experts"};
  const std::span<const std::string_view> names =
      depth == 3 ? std::span(kNames) : std::span(kNames).subspan(1);
  // SGLang's published statistics write counts as floats ("12.0"): integral floats are
  // counts too; 2.5 is not.
  out.counts = detail::read_nested<std::int64_t>(
      value, "logical_count", shape, names, [](const Json& element, const std::string& where) {
        if (element.is_number_float()) {
          const double number = element.get<double>();
          constexpr double kLimit = 9223372036854775808.0;  // 2^63
          if (std::trunc(number) == number && number >= -kLimit && number < kLimit) {
            return std::int64_t(number);
          }
        }
        return detail::read_int(element, where, std::numeric_limits<std::int64_t>::min(),
                                std::numeric_limits<std::int64_t>::max());
      });
  out.window_size = depth == 3 ? shape[0] : 1;
  out.num_layers = shape[std::size_t(depth - 2)];
  out.num_experts = shape[std::size_t(depth - 1)];
  // An empty inner level leaves a size unknown (kAnySize) or zero; both are errors.
  MOESTAT_CHECK(out.num_layers > 0 && out.num_experts > 0,
                "logical_count has an empty row: expected at least one layer and one expert");
  validate(out);
  return out;
}

}  // namespace moestat::io
