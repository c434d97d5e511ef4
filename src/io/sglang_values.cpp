// Logical counts and placements out of (and into) SGLang's .pt values: through the .pt
// layout (pt_codec.cpp) and the payload mappings, as .pt files are read and written.
#include <algorithm>
#include <limits>
#include <moestat/error.hpp>
#include <moestat/io/sglang.hpp>

#include "codec.hpp"

namespace moestat::io {

// Per-pass and per-token dumps: physical counts of each record, mapped to logical experts
// through the map in force at the dump.
CountWindow detail::counts_of_records(const PtValue& dump) {
  const HostTensor& map_tensor = dump.at("last_physical_to_logical_map").tensor();
  const std::vector<std::int64_t> map =
      detail::integer_tensor(map_tensor, "last_physical_to_logical_map", 2);
  const std::int64_t layers = map_tensor.shape[0];
  const std::int64_t slots = map_tensor.shape[1];
  const auto [low, high] = std::minmax_element(map.begin(), map.end());
  // Every logical expert has a slot, so ids stay below the slot count.
  MOESTAT_CHECK(*low >= 0 && *high < slots,
                "last_physical_to_logical_map holds id {}, outside [0, {})",
                *low < 0 ? *low : *high, slots);
  CountWindow out;
  out.has_window_axis = true;
  out.num_layers = layers;
  out.num_experts = *high + 1;
  const PtList& records = dump.at("records").list();
  MOESTAT_CHECK(!records.empty(), "the dump holds no records");
  out.window_size = std::int64_t(records.size());
  out.counts.assign(std::size_t(out.window_size * layers * out.num_experts), 0);
  for (std::size_t pass = 0; pass < records.size(); ++pass) {
    if (const PtValue* id = records[pass].find("forward_pass_id");
        id != nullptr && id->kind() == PtValue::Kind::kInt) {
      out.pass_rows.pass_ids.push_back(id->as_int());
    }
    const HostTensor& physical = records[pass].at("global_physical_count").tensor();
    const std::string name = fmt::format("records[{}].global_physical_count", pass);
    const std::vector<std::int64_t> counts = detail::integer_tensor(physical, name, 2);
    MOESTAT_CHECK(physical.shape[0] == layers && physical.shape[1] == slots,
                  "{} is [{}], expected [{}, {}] as the map", name, fmt::join(physical.shape, ", "),
                  layers, slots);
    std::int64_t* row = out.counts.data() + pass * std::size_t(layers * out.num_experts);
    for (std::int64_t l = 0; l < layers; ++l) {
      for (std::int64_t p = 0; p < slots; ++p) {
        const std::int64_t count = counts[std::size_t(l * slots + p)];
        MOESTAT_CHECK(count >= 0, "{} holds a negative count", name);
        std::int64_t& target = row[l * out.num_experts + map[std::size_t(l * slots + p)]];
        MOESTAT_CHECK(count <= std::numeric_limits<std::int64_t>::max() - target,
                      "{} overflows int64", name);
        target += count;
      }
    }
  }
  // Some record had no id.
  if (out.pass_rows.pass_ids.size() != records.size()) out.pass_rows.pass_ids.clear();
  return out;
}

CountWindow logical_counts_from_pt(const PtValue& value) {
  return std::get<CountWindow>(detail::payload_from_tensors(
      detail::kCountsMapping, detail::tensors_of_pt(value), {}, ".pt"));
}

PtValue placement_to_pt(const Placement& placement) {
  return detail::pt_of_tensors(detail::kPlacementMapping.to_tensors(placement));
}

Placement placement_from_pt(const PtValue& value, std::int64_t num_logical_experts,
                            std::uint64_t version) {
  return std::get<Placement>(detail::payload_from_tensors(
      detail::kPlacementMapping, detail::tensors_of_pt(value),
      {.num_logical_experts = num_logical_experts, .version = version}, ".pt"));
}

}  // namespace moestat::io
