// Statistics in torch .pt files, as SGLang's torch.save writes them and torch.load reads
// them. The one place that lays named tensors out in SGLang's dicts: counts as a stat dump,
// read also from per-pass and per-token dumps; a mask as a bare bool tensor (read also
// under "gpu_experts_masks"); anything else, a placement among them, as a dict of tensors.
#include <moestat/error.hpp>
#include <moestat/io/pt.hpp>

#include "codec.hpp"

namespace moestat::io::detail {
namespace {

const std::string_view kCountsName = kCountsMapping.forms.front().name;
const std::string_view kMaskName = kExpertMaskMapping.forms.front().name;

PtValue parse(std::string_view bytes, std::string_view name) {
  return read_pt(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())), name);
}

class PtCodec final : public TensorContainerCodec {
 public:
  /// A zip archive, as torch.save writes since torch 1.6.
  bool has_signature(std::string_view bytes) const override {
    return bytes.starts_with("PK\x03\x04");
  }
  /// PROTO and a protocol torch.save used: a .pt file from before torch 1.6 (or saved with
  /// _use_new_zipfile_serialization=False), a bare pickle without the zip around it.
  bool starts_like(std::string_view bytes) const override {
    return bytes.size() >= 2 && bytes[0] == '\x80' && bytes[1] >= 2 && bytes[1] <= 5;
  }
  StatisticsKind kind_of(std::string_view bytes, std::string_view name) const override {
    const NamedTensors tensors = tensors_of_pt(parse(bytes, name));
    for (const PayloadMapping* mapping : payload_mappings()) {
      if (payload_tensor(*mapping, tensors).second != nullptr) return mapping->kind;
    }
    return StatisticsKind::kLogicalCounts;
  }

 private:
  std::string_view container_name() const noexcept override { return ".pt"; }
  NamedTensors decode(std::string_view bytes, std::string_view name, const PayloadMapping&,
                      const ReadOptions&) const override {
    return tensors_of_pt(parse(bytes, name));
  }
  std::string encode(const NamedTensors& tensors) const override {
    return pt_to_bytes(pt_of_tensors(tensors));
  }
};

}  // namespace

const Codec& pt_codec() {
  static const PtCodec codec;
  return codec;
}

NamedTensors tensors_of_pt(const PtValue& value) {
  if (value.kind() == PtValue::Kind::kTensor)
    return {{}, {{std::string(kMaskName), value.tensor()}}};
  if (value.find(kCountsName) == nullptr && value.find("records") != nullptr) {
    return window_tensors(counts_of_records(value));
  }
  NamedTensors out;
  if (value.kind() != PtValue::Kind::kDict) return out;
  for (const auto& [key, item] : value.dict()) {
    if (key.kind() == PtValue::Kind::kStr && item.kind() == PtValue::Kind::kTensor) {
      out.tensors.emplace_back(key.as_str(), item.tensor());
    }
  }
  return out;
}

PtValue pt_of_tensors(const NamedTensors& tensors) {
  if (const HostTensor* counts = tensors.find(kCountsName))
    return PtValue(stat_dump(*counts, 0, {}));
  if (tensors.tensors.size() == 1 && tensors.tensors.front().first == kMaskName) {
    return PtValue(tensors.tensors.front().second);
  }
  PtDict dict;
  for (const auto& [name, tensor] : tensors.tensors)
    dict.emplace_back(PtValue(name), PtValue(tensor));
  return PtValue(std::move(dict));
}

}  // namespace moestat::io::detail
