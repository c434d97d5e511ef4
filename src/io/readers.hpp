// The readers behind the public *_from_json functions, on an already parsed document, so a
// caller that inspects the keys first (document_from_json) parses the text only once.
#pragma once

#include <moestat/io/document.hpp>

#include "json_support.hpp"
#include "payload_mappings.hpp"

namespace moestat::io::detail {

Snapshot snapshot_from_document(const Json& document);
/// Whether the document has a key of one of `mapping`'s tensors.
bool holds_payload(const Json& document, const PayloadMapping& mapping);
/// `mapping`'s payload out of a document, as the JSON codec reads it (json_codec.cpp).
StatisticsFile payload_from_document(const Json& document, const PayloadMapping& mapping,
                                     const ReadOptions& options);

}  // namespace moestat::io::detail
