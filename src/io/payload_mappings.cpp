// The table of payload mappings, and the integer check every payload's tensor passes.
#include "payload_mappings.hpp"

#include <algorithm>
#include <moestat/error.hpp>

namespace moestat::io::detail {

const PayloadMapping& payload_mapping(StatisticsKind kind) {
  switch (kind) {
    case StatisticsKind::kLogicalCounts:
      return kCountsMapping;
    case StatisticsKind::kPlacement:
      return kPlacementMapping;
    case StatisticsKind::kExpertMask:
      return kExpertMaskMapping;
  }
  MOESTAT_FAIL("internal: no mapping for statistics kind {}", int(kind));
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
