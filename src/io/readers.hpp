// The readers behind the public *_from_json functions, on an already parsed document, so a
// caller that inspects the keys first (document_from_json) parses the text only once.
#pragma once

#include <moestat/io/counts_json.hpp>
#include <moestat/io/document.hpp>

#include "json_support.hpp"

namespace moestat::io::detail {

Snapshot snapshot_from_document(const Json& document);
Placement placement_from_document(const Json& document, std::int64_t num_logical_experts,
                                  std::uint64_t version);
/// Whether the document has a counts key ("logical_count" or "expert_popularity").
bool holds_counts(const Json& document);
CountWindow logical_counts_from_document(const Json& document, Fractions fractions);

}  // namespace moestat::io::detail
