// Each statistics payload (counts, placement, expert mask) as named tensors: the one form
// every codec reads and writes a payload in. A container of named tensors (safetensors)
// holds them as they are; the JSON and .pt codecs each lay them out in their own documents
// in one place (json_codec.cpp, pt_codec.cpp), from the tensor forms declared here.
// One file per payload (counts_tensors.cpp, placement_tensors.cpp, expert_mask_tensors.cpp);
// payload_mappings.cpp is the one table of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <moestat/io/named_tensors.hpp>
#include <moestat/io/statistics.hpp>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moestat::io::detail {

/// What a reader is asked for besides the payload's kind.
struct ReadOptions {
  Fractions fractions = Fractions::kRefuse;  ///< Counts: non-whole entries.
  std::int64_t num_logical_experts = 0;      ///< Placements: E, or 0 for max id + 1.
  std::uint64_t version = 0;                 ///< Placements: the version given to the result.
  /// Placements: the map's shape required ([num_layers, num_physical_experts]: what an
  /// engine's model takes), 0 for any size.
  std::int64_t num_layers = 0;
  std::int64_t num_physical_experts = 0;
};

/// What each element of a payload's tensor is, for documents that spell elements out one by
/// one (JSON) and so check them one by one, naming the element.
enum class Element : std::uint8_t {
  kCount,  ///< A number: whole ones are counts; the mapping says what non-whole ones are.
  kId,     ///< An integer in [0, 2^31 - 1).
  kFlag,   ///< true or false.
};

/// A dimension of a tensor, for messages: "passes" and "pass".
struct Level {
  std::string_view plural;
  std::string_view singular;
};

/// One name a payload's tensor goes by, with its dimensions.
struct TensorForm {
  std::string_view name;
  /// Its dimensions, outermost first.
  std::span<const Level> levels;
  /// How many leading levels a file may leave out ([L, E] counts for [W, L, E]).
  std::size_t optional_levels = 0;
  Element element = Element::kCount;
};

/// One payload both ways.
struct PayloadMapping {
  StatisticsKind kind;
  /// The names its main tensor goes by: the first is written; a reader takes the first one
  /// the file holds (fiddler's "expert_popularity" is read as "logical_count").
  std::span<const TensorForm> forms;
  NamedTensors (*to_tensors)(const StatisticsFile& file);
  /// `tensors` holds one of `forms` (the codec checks that first, naming itself); messages
  /// name the tensor by the form found.
  StatisticsFile (*from_tensors)(const NamedTensors& tensors, const ReadOptions& options);
};

/// The mapping of each kind.
const PayloadMapping& payload_mapping(StatisticsKind kind);
/// Every mapping, in the order a file read without saying which payload is tried: a
/// placement first (SGLang's --init-expert-location takes a file with its map as one), then
/// a mask, then counts.
std::span<const PayloadMapping* const> payload_mappings();

extern const PayloadMapping kCountsMapping;
extern const PayloadMapping kPlacementMapping;
extern const PayloadMapping kExpertMaskMapping;

/// The first of `mapping`'s forms that `has(name)` says a file holds, or nullptr.
template <typename Has>
const TensorForm* form_held(const PayloadMapping& mapping, Has&& has) {
  for (const TensorForm& form : mapping.forms) {
    if (has(form.name)) return &form;
  }
  return nullptr;
}
/// The tensor of the first of `mapping`'s forms in `tensors`, with its name; {} when none.
std::pair<std::string_view, const HostTensor*> payload_tensor(const PayloadMapping& mapping,
                                                              const NamedTensors& tensors);

// ---- the tensors themselves, shared with SGLang's .pt dicts (sglang_dump.cpp) ----

/// "name[i][j]": the element at row-major `flat` of a tensor of `shape`, for messages.
std::string element_name(std::string_view name, std::span<const std::int64_t> shape,
                         std::size_t flat);

/// An integer tensor of `dims` dimensions with every size positive, as int64; moestat::Error
/// naming `name` otherwise.
std::vector<std::int64_t> integer_tensor(const HostTensor& tensor, std::string_view name,
                                         std::size_t dims);

/// "logical_count" [W, L, E] (or [L, E] without a window axis), int32 when every count fits
/// (what SGLang writes), else int64. Whole counts only.
HostTensor logical_count_tensor(const CountWindow& counts);
/// Counts of `shape` as int32 when every value fits (what SGLang writes), else int64.
HostTensor count_tensor(std::vector<std::int64_t> shape, std::span<const std::int64_t> values);
/// The counts and what the source says of each pass ("pass_ids", "placement_versions",
/// "pass_num_tokens", [W] int64 each, where known): what a container that keeps pass
/// metadata (a moestat snapshot, SGLang's per-pass dumps) holds. Counts files are written
/// without it (kCountsMapping), as SGLang's formats have no place for it.
NamedTensors window_tensors(const CountWindow& counts);

/// "physical_to_logical_map" [L, P] int64.
HostTensor physical_to_logical_tensor(const Placement& placement);

}  // namespace moestat::io::detail
