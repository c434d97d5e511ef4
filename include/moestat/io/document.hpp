// Any moestat JSON document (snapshot, counts or placement), detected from its keys.
#pragma once

#include <cstdint>
#include <filesystem>
#include <moestat/counts.hpp>
#include <moestat/io/formats.hpp>
#include <moestat/placement.hpp>
#include <moestat/snapshot.hpp>
#include <string_view>
#include <variant>

namespace moestat::io {

/// What a moestat JSON document holds.
enum class DocumentKind : std::uint8_t { kSnapshot, kLogicalCounts, kPlacement };
/// "snapshot", "logical_count" or "placement".
std::string_view document_kind_name(DocumentKind kind) noexcept;

/// One parsed document; the alternative index follows DocumentKind.
using Document = std::variant<Snapshot, CountWindow, Placement>;
DocumentKind document_kind(const Document& document) noexcept;

/// Detects and parses a document: an object with "format": "moestat.snapshot" is a
/// snapshot; else one with "physical_to_logical_map" a placement (checked first, as SGLang's
/// --init-expert-location does); else one with "logical_count" (or fiddler's
/// "expert_popularity") counts, whole ones only.
/// moestat::Error when it is none of these.
Document document_from_json(std::string_view text);

/// Reads and parses a file as document_from_json does. Every error message starts with the
/// path ("PATH: missing key ...").
Document read_document(const std::filesystem::path& path);
/// As above, of a file already read.
Document read_document(const DetectedFile& file);

}  // namespace moestat::io
