// Statistics in torch .pt files, as SGLang's torch.save writes them: a stat, per-pass or
// per-token dump for counts, {"physical_to_logical_map"} for placements, a bool tensor
// (bare, or under "gpu_experts_masks" on reading) for masks.
#include <moestat/error.hpp>
#include <moestat/io/pt.hpp>
#include <moestat/io/sglang.hpp>

#include "codec.hpp"

namespace moestat::io::detail {
namespace {

PtValue parse(std::string_view bytes, std::string_view name) {
  return read_pt(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())), name);
}

class PtCodec final : public Codec {
 public:
  StatisticsKind kind_of(std::string_view bytes, std::string_view name) const override {
    const PtValue value = parse(bytes, name);
    if (value.find(kPlacementMapping.tensor_name) != nullptr) return StatisticsKind::kPlacement;
    if (value.find(kExpertMaskMapping.tensor_name) != nullptr ||
        value.kind() == PtValue::Kind::kTensor) {
      return StatisticsKind::kExpertMask;
    }
    return StatisticsKind::kLogicalCounts;
  }

  StatisticsFile read(std::string_view bytes, std::string_view name, StatisticsKind kind,
                      const ReadOptions& options) const override {
    const PtValue value = parse(bytes, name);
    switch (kind) {
      case StatisticsKind::kLogicalCounts:
        return logical_counts_from_pt(value);
      case StatisticsKind::kPlacement:
        return placement_from_pt(value, options.num_logical_experts, options.version);
      case StatisticsKind::kExpertMask: {
        const PtValue* keyed = value.find(kExpertMaskMapping.tensor_name);
        return expert_mask_from_tensor(keyed != nullptr ? keyed->tensor() : value.tensor());
      }
    }
    MOESTAT_FAIL("internal: no .pt form of {}", statistics_kind_name(kind));
  }

  std::string write(const StatisticsFile& file) const override {
    return pt_to_bytes(std::visit(
        [](const auto& value) -> PtValue {
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, CountWindow>) {
            return sglang_stat_dump(value);
          } else if constexpr (std::is_same_v<T, Placement>) {
            return placement_to_pt(value);
          } else {
            return PtValue(expert_mask_tensor(value));
          }
        },
        file));
  }
};

}  // namespace

const Codec& pt_codec() {
  static const PtCodec codec;
  return codec;
}

}  // namespace moestat::io::detail
