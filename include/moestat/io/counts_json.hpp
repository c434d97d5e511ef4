// Logical counts as JSON: SGLang's {"logical_count": ...} and fiddler's expert_popularity.
#pragma once

#include <cstdint>
#include <moestat/counts.hpp>
#include <string>
#include <string_view>

namespace moestat::io {

/// Whether a counts reader takes non-whole entries (CountWindow says why they exist):
/// kRefuse names the first one as an error, kKeep reads the file into fractional_counts.
enum class Fractions : std::uint8_t { kRefuse, kKeep };

/// `{"logical_count": ...}`, 3-d when counts.has_window_axis, else 2-d (then W must be 1).
/// Pass metadata is not part of SGLang's format and is not written. moestat::Error when
/// sizes do not match, a count is negative or the window is fractional.
std::string logical_counts_to_json(const CountWindow& counts);
/// As above, followed by the members of `members`, a JSON object's text, in its order: what
/// an engine says of its counts beside them (vLLM's {"vllm_eplb": {...}}). moestat::Error
/// when `members` is not an object within the JSON readers' bounds or names "logical_count".
std::string logical_counts_to_json(const CountWindow& counts, std::string_view members);
/// Reads SGLang's `logical_count` [L][E] or [W][L][E], or fiddler's `expert_popularity`
/// [L][E] (its Mixtral statistics), from a JSON object (other keys are ignored). Every entry
/// must be a non-negative number, whole unless `fractions` is kKeep (a whole float such as
/// SGLang's "12.0" is a count); L, E (and W) must be at least 1.
CountWindow logical_counts_from_json(std::string_view text,
                                     Fractions fractions = Fractions::kRefuse);

}  // namespace moestat::io
