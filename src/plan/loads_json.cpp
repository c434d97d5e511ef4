// Load matrices from JSON: SGLang's `logical_count` (integers, or the floats of SGLang's
// published statistics) and fiddler's `expert_popularity`.
#include <array>
#include <moestat/error.hpp>
#include <moestat/plan/loads.hpp>

#include "../io/json_support.hpp"

namespace moestat::plan {

LoadWindow load_window_from_json(std::string_view text) {
  namespace json = io::detail;
  const json::Json doc = json::parse_json(text);
  json::require_object(doc, "loads with \"logical_count\" or \"expert_popularity\"");
  const bool fiddler = !doc.contains("logical_count") && doc.contains("expert_popularity");
  const std::string_view key = fiddler ? "expert_popularity" : "logical_count";
  const json::Json& value = json::require_key(doc, key);
  MOESTAT_CHECK(value.is_array() && !value.empty(), "{} is {}: expected [layers][experts]{}", key,
                json::describe(value), fiddler ? "" : " or [passes][layers][experts]");
  const int depth = json::nesting_depth(value);
  MOESTAT_CHECK(depth == 2 || (depth == 3 && !fiddler),
                "{} has {} levels of nesting, expected [layers][experts] (2){}", key, depth,
                fiddler ? "" : " or [passes][layers][experts] (3)");

  constexpr std::array<std::string_view, 3> kNames{"passes", "layers", "experts"};
  const std::span<const std::string_view> names =
      depth == 3 ? std::span(kNames) : std::span(kNames).subspan(1);
  std::vector<std::int64_t> shape(std::size_t(depth), json::kAnySize);
  std::vector<double> values = json::read_nested_doubles(value, key, shape, names);
  const std::int64_t num_passes = depth == 3 ? shape[0] : 1;
  const std::int64_t num_layers = shape[std::size_t(depth - 2)];
  const std::int64_t num_experts = shape[std::size_t(depth - 1)];
  MOESTAT_CHECK(num_passes > 0 && num_layers > 0 && num_experts > 0,
                "{} has an empty row: expected at least one layer and one expert", key);
  for (std::size_t i = 0; i < values.size(); ++i) {
    MOESTAT_CHECK(values[i] >= 0.0, "{} entry {} (layer {}, expert {}) is {}, expected >= 0", key,
                  i, std::int64_t(i) / num_experts % num_layers, std::int64_t(i) % num_experts,
                  values[i]);
  }

  return split_window(num_layers, num_experts, std::span<const double>(values), depth == 3);
}

}  // namespace moestat::plan
