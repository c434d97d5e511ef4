// What codecs share: telling payloads apart by their tensor names, and reading and writing
// every payload through its mapping.
#include "codec.hpp"

#include <algorithm>
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
    // A few names say what the file is; all of an unrelated file's 200,000 made a 1.7 MB error.
    constexpr std::size_t kNamesShown = 5;
    const std::size_t count = tensors.tensors.size();
    std::vector<std::string_view> names;
    for (std::size_t i = 0; i < std::min(count, kNamesShown); ++i) {
      names.push_back(tensors.tensors[i].first);
    }
    const std::string more = count > kNamesShown ? fmt::format(", ... ({} in all)", count) : "";
    MOESTAT_FAIL("no tensor \"{}\" in the {} file ({})", mapping.forms.front().name, container,
                 names.empty() ? std::string("it holds no tensors")
                               : fmt::format("its tensors: {}{}", fmt::join(names, ", "), more));
  }
  return mapping.from_tensors(tensors, options);
}

StatisticsFile TensorContainerCodec::read(std::string_view bytes, std::string_view name,
                                          StatisticsKind kind, const ReadOptions& options) const {
  const PayloadMapping& mapping = payload_mapping(kind);
  return payload_from_tensors(mapping, decode(bytes, name, mapping, options), options,
                              container_name());
}

std::string TensorContainerCodec::write(const StatisticsFile& file) const {
  return encode(payload_mapping(statistics_kind(file)).to_tensors(file));
}

}  // namespace moestat::io::detail
