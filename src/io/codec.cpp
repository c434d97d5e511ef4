// What codecs share: telling payloads apart by their keys, and tensor containers' use of
// the payload mappings.
#include "codec.hpp"

#include <moestat/error.hpp>

namespace moestat::io::detail {

StatisticsKind Codec::kind_of(std::string_view bytes, std::string_view) const {
  const auto has = [&](std::string_view key) {
    // Cheap and sufficient: the key names appear verbatim, quoted, in JSON and in a
    // safetensors header.
    return bytes.find(fmt::format("\"{}\"", key)) != std::string_view::npos;
  };
  if (has(kPlacementMapping.tensor_name)) return StatisticsKind::kPlacement;
  if (has(kExpertMaskMapping.tensor_name)) return StatisticsKind::kExpertMask;
  return StatisticsKind::kLogicalCounts;
}

StatisticsFile TensorContainerCodec::read(std::string_view bytes, std::string_view,
                                          StatisticsKind kind, const ReadOptions& options) const {
  const NamedTensors tensors = decode(bytes);
  const PayloadMapping& mapping = payload_mapping(kind);
  MOESTAT_CHECK(tensors.find(mapping.tensor_name) != nullptr, "no tensor \"{}\" in the {} file",
                mapping.tensor_name, container_name());
  return mapping.from_tensors(tensors, options);
}

std::string TensorContainerCodec::write(const StatisticsFile& file) const {
  return encode(payload_mapping(statistics_kind(file)).to_tensors(file));
}

}  // namespace moestat::io::detail
