// What codecs share: telling payloads apart by their tensor names, and reading and writing
// every payload through its mapping.
#include "codec.hpp"

#include <moestat/error.hpp>

namespace moestat::io::detail {

StatisticsKind Codec::kind_of(std::string_view bytes, std::string_view) const {
  const auto has = [&](std::string_view name) {
    // Cheap and sufficient: the names appear verbatim, quoted, in JSON and in a safetensors
    // header.
    return bytes.find(fmt::format("\"{}\"", name)) != std::string_view::npos;
  };
  for (const PayloadMapping* mapping : payload_mappings()) {
    if (form_held(*mapping, has) != nullptr) return mapping->kind;
  }
  return StatisticsKind::kLogicalCounts;
}

StatisticsFile payload_from_tensors(const PayloadMapping& mapping, const NamedTensors& tensors,
                                    const ReadOptions& options, std::string_view container) {
  if (payload_tensor(mapping, tensors).second == nullptr) {
    std::vector<std::string_view> names;
    for (const auto& [name, tensor] : tensors.tensors) names.push_back(name);
    MOESTAT_FAIL("no tensor \"{}\" in the {} file ({})", mapping.forms.front().name, container,
                 names.empty() ? "it holds no tensors"
                               : fmt::format("its tensors: {}", fmt::join(names, ", ")));
  }
  return mapping.from_tensors(tensors, options);
}

StatisticsFile TensorContainerCodec::read(std::string_view bytes, std::string_view name,
                                          StatisticsKind kind, const ReadOptions& options) const {
  const PayloadMapping& mapping = payload_mapping(kind);
  return payload_from_tensors(mapping, decode(bytes, name, mapping), options, container_name());
}

std::string TensorContainerCodec::write(const StatisticsFile& file) const {
  return encode(payload_mapping(statistics_kind(file)).to_tensors(file));
}

}  // namespace moestat::io::detail
