// SGLang's `{"physical_to_logical_map": [L][P]}` placement files.
#include <algorithm>
#include <array>
#include <limits>
#include <moestat/error.hpp>
#include <moestat/io/placement_json.hpp>

#include "json_support.hpp"
#include "readers.hpp"

namespace moestat::io {

std::string placement_to_json(const Placement& placement) {
  detail::OrderedJson doc = detail::OrderedJson::object();
  doc["physical_to_logical_map"] = detail::to_nested<std::int32_t>(
      placement.physical_to_logical(),
      std::array<std::int64_t, 2>{placement.num_layers(), placement.num_physical_experts()});
  return detail::dump_document(doc);
}

Placement placement_from_json(std::string_view text, std::int64_t num_logical_experts,
                              std::uint64_t version) {
  return detail::placement_from_document(detail::parse_json(text), num_logical_experts, version);
}

Placement detail::placement_from_document(const Json& doc, std::int64_t num_logical_experts,
                                          std::uint64_t version) {
  detail::require_object(doc, "a placement with \"physical_to_logical_map\"");
  constexpr std::string_view kKey = "physical_to_logical_map";
  const detail::Json& value = detail::require_key(doc, kKey);
  MOESTAT_CHECK(!(value.is_array() && value.empty()), "{} is empty: expected [layers][slots]",
                kKey);
  std::vector<std::int64_t> shape{detail::kAnySize, detail::kAnySize};
  const std::array<std::string_view, 2> names{"layers", "physical slots"};
  const std::vector<std::int64_t> ids = detail::read_nested_ints(
      value, kKey, shape, names, 0, std::numeric_limits<std::int32_t>::max() - 1);
  MOESTAT_CHECK(shape[1] > 0, "{}[0] is empty: expected at least one physical slot", kKey);
  const std::int64_t max_id = *std::max_element(ids.begin(), ids.end());
  const std::int64_t num_logical = num_logical_experts > 0 ? num_logical_experts : max_id + 1;
  MOESTAT_CHECK(num_logical <= shape[1],
                "{} is not a valid placement: {} logical experts (ids up to {}) do not fit in {} "
                "physical slots per layer",
                kKey, num_logical, max_id, shape[1]);
  try {
    return Placement(shape[0], shape[1], num_logical,
                     std::vector<std::int32_t>(ids.begin(), ids.end()), version);
  } catch (const Error& error) {
    // Placement's own checks (replicas, id ranges) as a problem of this key.
    throw error.with_context(fmt::format("{} is not a valid placement", kKey));
  }
}

}  // namespace moestat::io
