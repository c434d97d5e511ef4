// Statistics in JSON: moestat's snapshot and SGLang's logical_count documents for counts,
// {"physical_to_logical_map"} for placements, {"gpu_experts_masks": [[bool]]} for masks.
#include <moestat/error.hpp>
#include <moestat/io/counts_json.hpp>
#include <moestat/io/document.hpp>
#include <moestat/io/placement_json.hpp>
#include <moestat/io/sglang.hpp>

#include "codec.hpp"
#include "json_support.hpp"
#include "readers.hpp"

namespace moestat::io::detail {
namespace {

constexpr std::string_view kMaskKey = "gpu_experts_masks";

CountWindow read_counts(std::string_view bytes, Fractions fractions) {
  // Detected as document_from_json detects documents, the counts read with `fractions`.
  const Json document = parse_json(bytes);
  const bool object = document.is_object();
  if (object && document.contains("format")) {
    return count_window_of(snapshot_from_document(document));
  }
  if (object && !document.contains("physical_to_logical_map") && holds_counts(document)) {
    return logical_counts_from_document(document, fractions);
  }
  // Not counts: document_from_json says what it is instead, or why it is nothing.
  const Document other = document_from_json(bytes);
  MOESTAT_FAIL("holds a {}, not logical counts", document_kind_name(document_kind(other)));
}

ExpertMask read_expert_mask(std::string_view bytes) {
  const Json document = parse_json(bytes);
  require_object(document, "an expert mask");
  std::vector<std::int64_t> shape{kAnySize, kAnySize};
  constexpr std::string_view kDims[] = {"layers", "experts"};
  const std::vector<std::uint8_t> flags = read_nested<std::uint8_t>(
      require_key(document, kMaskKey), kMaskKey, shape, kDims,
      [](const Json& value, const std::string& where) {
        MOESTAT_CHECK(value.is_boolean(), "{} is {}, expected true or false", where,
                      describe(value));
        return std::uint8_t(value.get<bool>() ? 1 : 0);
      });
  MOESTAT_CHECK(shape[0] > 0 && shape[1] > 0, "{} is empty", kMaskKey);
  return {shape[0], shape[1], flags};
}

std::string expert_mask_to_json(const ExpertMask& mask) {
  // The tensor form checks the mask's sizes and makes every flag 0 or 1.
  const std::vector<std::uint8_t> on_gpu = expert_mask_tensor(mask).values<std::uint8_t>();
  const std::vector<bool> flags(on_gpu.begin(), on_gpu.end());
  OrderedJson rows = OrderedJson::array();
  for (std::int64_t l = 0; l < mask.num_layers; ++l) {
    rows.push_back(std::vector<bool>(flags.begin() + l * mask.num_experts,
                                     flags.begin() + (l + 1) * mask.num_experts));
  }
  OrderedJson document = OrderedJson::object();
  document[std::string(kMaskKey)] = std::move(rows);
  return dump_document(document);
}

class JsonCodec final : public Codec {
 public:
  StatisticsFile read(std::string_view bytes, std::string_view, StatisticsKind kind,
                      const ReadOptions& options) const override {
    switch (kind) {
      case StatisticsKind::kLogicalCounts:
        return read_counts(bytes, options.fractions);
      case StatisticsKind::kPlacement:
        return placement_from_json(bytes, options.num_logical_experts, options.version);
      case StatisticsKind::kExpertMask:
        return read_expert_mask(bytes);
    }
    MOESTAT_FAIL("internal: no JSON form of {}", statistics_kind_name(kind));
  }

  std::string write(const StatisticsFile& file) const override {
    return std::visit(
        [](const auto& value) -> std::string {
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, CountWindow>) {
            return logical_counts_to_json(value);
          } else if constexpr (std::is_same_v<T, Placement>) {
            return placement_to_json(value);
          } else {
            return expert_mask_to_json(value);
          }
        },
        file);
  }
};

}  // namespace

const Codec& json_codec() {
  static const JsonCodec codec;
  return codec;
}

}  // namespace moestat::io::detail
