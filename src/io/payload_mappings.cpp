// The table of payload mappings, and the checks every payload's tensor passes.
#include "payload_mappings.hpp"

#include <algorithm>
#include <array>
#include <moestat/error.hpp>

namespace moestat::io::detail {

const PayloadMapping& payload_mapping(StatisticsKind kind) {
  for (const PayloadMapping* mapping : payload_mappings()) {
    if (mapping->kind == kind) return *mapping;
  }
  MOESTAT_FAIL("internal: no mapping for statistics kind {}", int(kind));
}

std::span<const PayloadMapping* const> payload_mappings() {
  static const std::array<const PayloadMapping*, 3> kAll{&kPlacementMapping, &kExpertMaskMapping,
                                                         &kCountsMapping};
  return kAll;
}

std::pair<std::string_view, const HostTensor*> payload_tensor(const PayloadMapping& mapping,
                                                              const NamedTensors& tensors) {
  const TensorForm* form =
      form_held(mapping, [&](std::string_view name) { return tensors.find(name) != nullptr; });
  if (form == nullptr) return {};
  return {form->name, tensors.find(form->name)};
}

std::string element_name(std::string_view name, std::span<const std::int64_t> shape,
                         std::size_t flat) {
  if (shape.empty()) return std::string(name);
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = std::int64_t(flat % std::size_t(shape[d]));
    flat /= std::size_t(shape[d]);
  }
  return fmt::format("{}[{}]", name, fmt::join(index, "]["));
}

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

}  // namespace moestat::io::detail
