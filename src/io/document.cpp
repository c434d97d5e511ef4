// Detecting which moestat document a JSON file holds, and reading it with the path in errors.
#include <moestat/error.hpp>
#include <moestat/io/document.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/snapshot_json.hpp>

#include "json_support.hpp"
#include "readers.hpp"

namespace moestat::io {

std::string_view document_kind_name(DocumentKind kind) noexcept {
  switch (kind) {
    case DocumentKind::kSnapshot:
      return "snapshot";
    case DocumentKind::kLogicalCounts:
      return "logical_count";
    case DocumentKind::kPlacement:
      return "placement";
  }
  return "unknown";
}

DocumentKind document_kind(const Document& document) noexcept {
  return static_cast<DocumentKind>(document.index());
}

Document document_from_json(std::string_view text) {
  const detail::Json doc = detail::parse_json(text);
  MOESTAT_CHECK(doc.is_object(),
                "expected a JSON object (a moestat snapshot, SGLang logical_count or "
                "physical_to_logical_map), got {}",
                detail::describe(doc));
  if (doc.contains("format")) return detail::snapshot_from_document(doc);
  // A placement first, as SGLang's --init-expert-location takes such a file.
  if (detail::holds_payload(doc, detail::kPlacementMapping)) {
    return std::get<Placement>(detail::payload_from_document(doc, detail::kPlacementMapping, {}));
  }
  if (detail::holds_payload(doc, detail::kCountsMapping)) {
    return std::get<CountWindow>(detail::payload_from_document(doc, detail::kCountsMapping, {}));
  }
  std::string keys;
  for (const auto& item : doc.items()) {
    if (!keys.empty()) keys += ", ";
    if (keys.size() > 60) {
      keys += "...";
      break;
    }
    keys += item.key();
  }
  MOESTAT_FAIL(
      "not a moestat document: expected \"format\": \"{}\", \"physical_to_logical_map\" or "
      "\"logical_count\", found keys [{}]",
      kSnapshotFormat, keys);
}

Document read_document(const std::filesystem::path& path) {
  // Read as JSON whatever its name or first bytes say: the parser says what it is not.
  return read_document({.path = path, .bytes = read_text_file(path), .format = FileFormat::kJson});
}

Document read_document(const DetectedFile& file) {
  try {
    return document_from_json(file.bytes);
  } catch (const Error& error) {
    throw error.with_context(file.path.string());
  }
}

}  // namespace moestat::io
