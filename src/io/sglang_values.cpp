// Logical counts, placements and expert masks out of (and into) .pt values.
#include <algorithm>
#include <limits>
#include <moestat/error.hpp>
#include <moestat/io/sglang.hpp>

namespace moestat::io {
namespace {

std::string keys_of(const PtValue& value) {
  if (value.kind() != PtValue::Kind::kDict) return fmt::format("a {}", pt_kind_name(value.kind()));
  std::vector<std::string> keys;
  for (const auto& [key, item] : value.dict()) {
    keys.push_back(key.kind() == PtValue::Kind::kStr ? key.as_str()
                                                     : fmt::format("{}", key.as_int()));
    if (keys.size() == 8) break;
  }
  return fmt::format("a dict with keys [{}]", fmt::join(keys, ", "));
}

/// An integer tensor of `dims` dimensions with every size positive, as int64.
std::vector<std::int64_t> integer_tensor(const HostTensor& tensor, std::string_view name,
                                         std::size_t dims) {
  MOESTAT_CHECK(tensor.shape.size() == dims, "{} has {} dimensions, expected {}", name,
                tensor.shape.size(), dims);
  MOESTAT_CHECK(std::all_of(tensor.shape.begin(), tensor.shape.end(),
                            [](std::int64_t size) { return size > 0; }),
                "{} has an empty dimension (shape [{}])", name, fmt::join(tensor.shape, ", "));
  MOESTAT_CHECK(tensor.dtype != DType::kFloat32 && tensor.dtype != DType::kFloat64,
                "{} holds {}, expected integers", name, dtype_name(tensor.dtype));
  return tensor.to_int64();
}

CountWindow counts_of_tensor(const HostTensor& tensor) {
  MOESTAT_CHECK(tensor.shape.size() == 2 || tensor.shape.size() == 3,
                "logical_count has {} dimensions, expected [L, E] or [W, L, E]",
                tensor.shape.size());
  CountWindow out;
  out.counts = integer_tensor(tensor, "logical_count", tensor.shape.size());
  out.has_window_axis = tensor.shape.size() == 3;
  out.window_size = out.has_window_axis ? tensor.shape[0] : 1;
  out.num_layers = tensor.shape[tensor.shape.size() - 2];
  out.num_experts = tensor.shape.back();
  out.validate("logical_count");
  return out;
}

/// Per-pass and per-token dumps: physical counts of each record, mapped to logical experts.
CountWindow counts_of_records(const PtValue& dump) {
  const HostTensor& map_tensor = dump.at("last_physical_to_logical_map").tensor();
  const std::vector<std::int64_t> map =
      integer_tensor(map_tensor, "last_physical_to_logical_map", 2);
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
      out.pass_ids.push_back(id->as_int());
    }
    const HostTensor& physical = records[pass].at("global_physical_count").tensor();
    const std::string name = fmt::format("records[{}].global_physical_count", pass);
    const std::vector<std::int64_t> counts = integer_tensor(physical, name, 2);
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
  if (out.pass_ids.size() != records.size()) out.pass_ids.clear();  // some record had no id
  return out;
}

}  // namespace

CountWindow logical_counts_from_pt(const PtValue& value) {
  if (const PtValue* counts = value.find("logical_count")) {
    return counts_of_tensor(counts->tensor());
  }
  if (value.find("records") != nullptr) return counts_of_records(value);
  MOESTAT_FAIL(
      "expected an SGLang dump (a dict with \"logical_count\", or \"records\" and "
      "\"last_physical_to_logical_map\"), got {}",
      keys_of(value));
}

PtValue placement_to_pt(const Placement& placement) {
  const auto map = placement.physical_to_logical();
  const std::vector<std::int64_t> wide(map.begin(), map.end());
  return PtValue(PtDict{{PtValue("physical_to_logical_map"),
                         PtValue(HostTensor::of<std::int64_t>(
                             {placement.num_layers(), placement.num_physical_experts()}, wide))}});
}

Placement placement_from_pt(const PtValue& value, std::int64_t num_logical_experts,
                            std::uint64_t version) {
  MOESTAT_CHECK(value.find("physical_to_logical_map") != nullptr,
                "expected a dict with \"physical_to_logical_map\", got {}", keys_of(value));
  const HostTensor& tensor = value.at("physical_to_logical_map").tensor();
  const std::vector<std::int64_t> map = integer_tensor(tensor, "physical_to_logical_map", 2);
  const auto [low, high] = std::minmax_element(map.begin(), map.end());
  MOESTAT_CHECK(*low >= 0 && *high < std::numeric_limits<std::int32_t>::max(),
                "physical_to_logical_map holds id {}, outside [0, 2^31 - 1)",
                *low < 0 ? *low : *high);
  const std::int64_t experts = num_logical_experts > 0 ? num_logical_experts : *high + 1;
  return Placement(tensor.shape[0], tensor.shape[1], experts,
                   std::vector<std::int32_t>(map.begin(), map.end()), version);
}

HostTensor expert_mask_tensor(const ExpertMask& mask) {
  MOESTAT_CHECK(mask.num_layers > 0 && mask.num_experts > 0 &&
                    std::int64_t(mask.on_gpu.size()) == mask.num_layers * mask.num_experts,
                "expert mask of {} flags does not fill [{}, {}]", mask.on_gpu.size(),
                mask.num_layers, mask.num_experts);
  std::vector<std::uint8_t> flags(mask.on_gpu.size());
  std::transform(mask.on_gpu.begin(), mask.on_gpu.end(), flags.begin(),
                 [](std::uint8_t flag) { return std::uint8_t(flag != 0 ? 1 : 0); });
  return HostTensor::of<std::uint8_t>({mask.num_layers, mask.num_experts}, flags);
}

ExpertMask expert_mask_from_tensor(const HostTensor& tensor) {
  const std::vector<std::int64_t> flags = integer_tensor(tensor, "expert mask", 2);
  MOESTAT_CHECK(std::all_of(flags.begin(), flags.end(),
                            [](std::int64_t flag) { return flag == 0 || flag == 1; }),
                "expert mask holds values other than 0 and 1");
  return {tensor.shape[0], tensor.shape[1], std::vector<std::uint8_t>(flags.begin(), flags.end())};
}

}  // namespace moestat::io
