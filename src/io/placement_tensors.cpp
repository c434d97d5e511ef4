// Placements as named tensors: {"physical_to_logical_map": [L, P]}.
#include <algorithm>
#include <array>
#include <limits>
#include <moestat/error.hpp>

#include "payload_mappings.hpp"

namespace moestat::io::detail {
namespace {

constexpr std::string_view kTensorName = "physical_to_logical_map";
constexpr std::array<Level, 2> kLevels{{{"layers", "layer"}, {"physical slots", "physical slot"}}};
constexpr std::array<TensorForm, 1> kForms{{{kTensorName, kLevels, 0, Element::kId}}};

NamedTensors placement_to_tensors(const StatisticsFile& file) {
  NamedTensors out;
  out.metadata["format"] = "moestat.placement";
  out.tensors.emplace_back(kTensorName, physical_to_logical_tensor(std::get<Placement>(file)));
  return out;
}

/// E is max id + 1 (a valid map holds every logical expert) unless the reader gives it.
StatisticsFile placement_from_tensors(const NamedTensors& tensors, const ReadOptions& options) {
  const HostTensor& tensor = *tensors.find(kTensorName);
  const std::vector<std::int64_t> map = integer_tensor(tensor, kTensorName, 2);
  // The shape the reader's model takes (0: any size).
  const auto fits = [](std::int64_t required, std::int64_t size) {
    return required == 0 || required == size;
  };
  const auto text = [](std::int64_t required) {
    return required == 0 ? std::string("any") : fmt::to_string(required);
  };
  MOESTAT_CHECK(fits(options.num_layers, tensor.shape[0]) &&
                    fits(options.num_physical_experts, tensor.shape[1]),
                "{} is [{}, {}], expected [{}, {}] (layers x physical slots)", kTensorName,
                tensor.shape[0], tensor.shape[1], text(options.num_layers),
                text(options.num_physical_experts));
  constexpr std::int64_t kMaxId = std::numeric_limits<std::int32_t>::max() - 1;
  const auto outside =
      std::find_if(map.begin(), map.end(), [](std::int64_t id) { return id < 0 || id > kMaxId; });
  MOESTAT_CHECK(outside == map.end(), "{} is {}, outside [0, 2^31 - 1)",
                element_name(kTensorName, tensor.shape, std::size_t(outside - map.begin())),
                outside == map.end() ? 0 : *outside);
  const std::int64_t max_id = *std::max_element(map.begin(), map.end());
  const std::int64_t slots = tensor.shape[1];
  const std::int64_t experts =
      options.num_logical_experts > 0 ? options.num_logical_experts : max_id + 1;
  MOESTAT_CHECK(experts <= slots,
                "{} is not a valid placement: {} logical experts (ids up to {}) do not fit in {} "
                "physical slots per layer",
                kTensorName, experts, max_id, slots);
  try {
    return Placement(tensor.shape[0], slots, experts,
                     std::vector<std::int32_t>(map.begin(), map.end()), options.version);
  } catch (const Error& error) {
    // Placement's own checks (replicas, id ranges) as a problem of this tensor.
    throw error.with_context(fmt::format("{} is not a valid placement", kTensorName));
  }
}

}  // namespace

const PayloadMapping kPlacementMapping{StatisticsKind::kPlacement, kForms, placement_to_tensors,
                                       placement_from_tensors};

HostTensor physical_to_logical_tensor(const Placement& placement) {
  const auto map = placement.physical_to_logical();
  const std::vector<std::int64_t> wide(map.begin(), map.end());
  return HostTensor::of<std::int64_t>({placement.num_layers(), placement.num_physical_experts()},
                                      wide);
}

}  // namespace moestat::io::detail
