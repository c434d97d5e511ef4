// Placements as named tensors: {"physical_to_logical_map": [L, P]}.
#include <algorithm>
#include <limits>
#include <moestat/error.hpp>

#include "payload_mappings.hpp"

namespace moestat::io::detail {
namespace {

constexpr std::string_view kTensorName = "physical_to_logical_map";

NamedTensors placement_to_tensors(const StatisticsFile& file) {
  NamedTensors out;
  out.metadata["format"] = "moestat.placement";
  out.tensors.emplace_back(kTensorName, physical_to_logical_tensor(std::get<Placement>(file)));
  return out;
}

StatisticsFile placement_from_tensors(const NamedTensors& tensors, const ReadOptions& options) {
  return placement_from_tensor(*tensors.find(kTensorName), options.num_logical_experts,
                               options.version);
}

}  // namespace

const PayloadMapping kPlacementMapping{kTensorName, placement_to_tensors, placement_from_tensors};

HostTensor physical_to_logical_tensor(const Placement& placement) {
  const auto map = placement.physical_to_logical();
  const std::vector<std::int64_t> wide(map.begin(), map.end());
  return HostTensor::of<std::int64_t>({placement.num_layers(), placement.num_physical_experts()},
                                      wide);
}

Placement placement_from_tensor(const HostTensor& tensor, std::int64_t num_logical_experts,
                                std::uint64_t version) {
  const std::vector<std::int64_t> map = integer_tensor(tensor, "physical_to_logical_map", 2);
  const auto [low, high] = std::minmax_element(map.begin(), map.end());
  MOESTAT_CHECK(*low >= 0 && *high < std::numeric_limits<std::int32_t>::max(),
                "physical_to_logical_map holds id {}, outside [0, 2^31 - 1)",
                *low < 0 ? *low : *high);
  const std::int64_t experts = num_logical_experts > 0 ? num_logical_experts : *high + 1;
  return Placement(tensor.shape[0], tensor.shape[1], experts,
                   std::vector<std::int32_t>(map.begin(), map.end()), version);
}

}  // namespace moestat::io::detail
