// Logical counts as named tensors: {"logical_count": [W, L, E] or [L, E]}.
#include <algorithm>
#include <limits>
#include <moestat/error.hpp>

#include "payload_mappings.hpp"

namespace moestat::io::detail {
namespace {

constexpr std::string_view kTensorName = "logical_count";

NamedTensors counts_to_tensors(const StatisticsFile& file) {
  NamedTensors out;
  out.metadata["format"] = "moestat.logical_count";
  out.tensors.emplace_back(kTensorName, logical_count_tensor(std::get<CountWindow>(file)));
  return out;
}

StatisticsFile counts_from_tensors(const NamedTensors& tensors, const ReadOptions&) {
  return counts_from_tensor(*tensors.find(kTensorName));
}

}  // namespace

const PayloadMapping kCountsMapping{kTensorName, counts_to_tensors, counts_from_tensors};

HostTensor logical_count_tensor(const CountWindow& counts) {
  counts.validate("logical counts");
  counts.require_whole_counts("logical counts");
  std::vector<std::int64_t> shape{counts.num_layers, counts.num_experts};
  if (counts.has_window_axis) shape.insert(shape.begin(), counts.window_size);
  return count_tensor(std::move(shape), counts.counts);
}

HostTensor count_tensor(std::vector<std::int64_t> shape, std::span<const std::int64_t> values) {
  const bool fits = std::all_of(values.begin(), values.end(), [](std::int64_t value) {
    return value >= std::numeric_limits<std::int32_t>::min() &&
           value <= std::numeric_limits<std::int32_t>::max();
  });
  if (!fits) return HostTensor::of<std::int64_t>(std::move(shape), values);
  const std::vector<std::int32_t> narrow(values.begin(), values.end());
  return HostTensor::of<std::int32_t>(std::move(shape), narrow);
}

CountWindow counts_from_tensor(const HostTensor& tensor) {
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

}  // namespace moestat::io::detail
