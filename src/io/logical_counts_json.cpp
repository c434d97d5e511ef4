// Counts files in JSON: SGLang's `{"logical_count": [L][E] or [W][L][E]}` and fiddler's
// `{"expert_popularity": [L][E]}`.
#include <array>
#include <cmath>
#include <limits>
#include <moestat/error.hpp>
#include <moestat/io/counts_json.hpp>
#include <optional>

#include "json_support.hpp"
#include "readers.hpp"

namespace moestat::io {
namespace {

constexpr std::string_view kSglangKey = "logical_count";
constexpr std::string_view kFiddlerKey = "expert_popularity";

/// A whole float as an int64 count (SGLang's published statistics write "12.0").
std::optional<std::int64_t> whole(const detail::Json& element) {
  if (!element.is_number_float()) return std::nullopt;
  const double number = element.get<double>();
  constexpr double kLimit = 9223372036854775808.0;  // 2^63
  if (std::trunc(number) != number || number < -kLimit || number >= kLimit) return std::nullopt;
  return std::int64_t(number);
}

}  // namespace

std::string logical_counts_to_json(const CountWindow& counts) {
  counts.validate(kSglangKey);
  counts.require_whole_counts(kSglangKey);
  detail::OrderedJson doc = detail::OrderedJson::object();
  if (counts.has_window_axis) {
    doc[std::string(kSglangKey)] = detail::to_nested<std::int64_t>(
        counts.counts,
        std::array<std::int64_t, 3>{counts.window_size, counts.num_layers, counts.num_experts});
  } else {
    doc[std::string(kSglangKey)] = detail::to_nested<std::int64_t>(
        counts.counts, std::array<std::int64_t, 2>{counts.num_layers, counts.num_experts});
  }
  return detail::dump_document(doc);
}

CountWindow logical_counts_from_json(std::string_view text, Fractions fractions) {
  return detail::logical_counts_from_document(detail::parse_json(text), fractions);
}

bool detail::holds_counts(const Json& doc) {
  return doc.contains(kSglangKey) || doc.contains(kFiddlerKey);
}

CountWindow detail::logical_counts_from_document(const Json& doc, Fractions fractions) {
  detail::require_object(doc, "counts with \"logical_count\" (or \"expert_popularity\")");
  const bool fiddler = !doc.contains(kSglangKey) && doc.contains(kFiddlerKey);
  const std::string_view key = fiddler ? kFiddlerKey : kSglangKey;
  const std::string_view shapes =
      fiddler ? "[layers][experts]" : "[layers][experts] or [passes][layers][experts]";
  const detail::Json& value = detail::require_key(doc, key);
  const int depth = detail::nesting_depth(value);
  MOESTAT_CHECK(!(value.is_array() && value.empty()), "{} is empty: expected {}", key, shapes);
  MOESTAT_CHECK(depth == 2 || (depth == 3 && !fiddler),
                "{} has {} levels of nesting, expected [layers][experts] (2){}", key, depth,
                fiddler ? "" : " or [passes][layers][experts] (3)");
  CountWindow out;
  out.has_window_axis = depth == 3;
  std::vector<std::int64_t> shape(std::size_t(depth), detail::kAnySize);
  constexpr std::array<std::string_view, 3> kNames{"passes", "layers", "experts"};
  const std::span<const std::string_view> names =
      depth == 3 ? std::span(kNames) : std::span(kNames).subspan(1);
  bool fractional = false;
  out.counts = detail::read_nested<std::int64_t>(
      value, key, shape, names, [&](const Json& element, const std::string& where) {
        if (const auto count = whole(element)) return *count;
        if (fractions == Fractions::kKeep && element.is_number_float()) {
          fractional = true;  // read again below, as doubles
          return std::int64_t{0};
        }
        return detail::read_int(element, where, std::numeric_limits<std::int64_t>::min(),
                                std::numeric_limits<std::int64_t>::max());
      });
  if (fractional) {
    out.counts.clear();
    shape.assign(std::size_t(depth), detail::kAnySize);
    out.fractional_counts = detail::read_nested_doubles(value, key, shape, names);
  }
  out.window_size = depth == 3 ? shape[0] : 1;
  out.num_layers = shape[std::size_t(depth - 2)];
  out.num_experts = shape[std::size_t(depth - 1)];
  // An empty inner level leaves a size unknown (kAnySize) or zero; both are errors.
  MOESTAT_CHECK(out.num_layers > 0 && out.num_experts > 0,
                "{} has an empty row: expected at least one layer and one expert", key);
  out.validate(key);
  return out;
}

}  // namespace moestat::io
