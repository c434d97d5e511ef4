// JSON read/write of snapshots, placements and SGLang-style count files, and safe file I/O.
#pragma once

#include <cstdint>
#include <filesystem>
#include <moestat/counts.hpp>
#include <moestat/placement.hpp>
#include <moestat/snapshot.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace moestat::io {

/// Whether a counts reader takes non-whole entries (CountWindow says why they exist):
/// kRefuse names the first one as an error, kKeep reads the file into fractional_counts.
enum class Fractions : std::uint8_t { kRefuse, kKeep };

// ---- moestat snapshot documents ----

/// The "format" value of a moestat snapshot document.
inline constexpr std::string_view kSnapshotFormat = "moestat.snapshot";
/// The document version this build writes and reads.
inline constexpr std::int64_t kSnapshotFormatVersion = 1;

/// moestat's own snapshot document: every field of Snapshot, plus "format" and "version".
/// Its "logical_count" key is [W][L][E] as SGLang's, so SGLang tools can read it too;
/// "physical_count" is [W][L][P]; token id arrays are [N][L][top_k]; decayed loads are
/// [L][E] / [L][P] or [] when absent. Integers are written exactly (int64 / uint64) and
/// doubles in their shortest form that parses back to the same value.
/// moestat::Error (naming the field) when the snapshot is inconsistent: array sizes that do
/// not match its dimensions, negative counts, ids out of range, non-finite loads.
std::string snapshot_to_json(const Snapshot& snapshot);
/// Parses a document written by snapshot_to_json; moestat::Error naming the bad field
/// (missing key, wrong nesting depth, ragged rows, non-integer, negative count, size that
/// does not match the header) otherwise.
Snapshot snapshot_from_json(std::string_view text);
/// The checks snapshot_to_json applies: moestat::Error naming the first inconsistent field.
void validate_snapshot(const Snapshot& snapshot);

// ---- placements ----

/// `{"physical_to_logical_map": [L][P]}`, exactly what SGLang's --init-expert-location takes.
/// The placement's version is not part of that format and is not written.
std::string placement_to_json(const Placement& placement);
/// Parses `{"physical_to_logical_map": [L][P]}` (other keys are ignored). E is taken as
/// max id + 1 (a valid map holds every logical expert) unless `num_logical_experts` > 0 is
/// given. The result has version `version`. moestat::Error on malformed input or a map that
/// is not a valid placement (an id out of range, an expert without a replica).
Placement placement_from_json(std::string_view text, std::int64_t num_logical_experts = 0,
                              std::uint64_t version = 0);

// ---- counts files ----

/// `{"logical_count": ...}`, 3-d when counts.has_window_axis, else 2-d (then W must be 1).
/// Pass metadata is not part of SGLang's format and is not written. moestat::Error when
/// sizes do not match, a count is negative or the window is fractional.
std::string logical_counts_to_json(const CountWindow& counts);
/// Reads SGLang's `logical_count` [L][E] or [W][L][E], or fiddler's `expert_popularity`
/// [L][E] (its Mixtral statistics), from a JSON object (other keys are ignored). Every entry
/// must be a non-negative number, whole unless `fractions` is kKeep (a whole float such as
/// SGLang's "12.0" is a count); L, E (and W) must be at least 1.
CountWindow logical_counts_from_json(std::string_view text,
                                     Fractions fractions = Fractions::kRefuse);

// ---- any document ----

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

// ---- files ----

/// The largest file moestat reads (every reader reads whole files): 4 GiB, about 40 times a
/// 1000-pass snapshot of DeepSeek-V3, or a per-token trace of 2 million DeepSeek-V3 tokens.
inline constexpr std::uint64_t kMaxFileBytes = std::uint64_t(4) << 30;

/// Reads a whole file; moestat::Error naming the path (and why) when it cannot be read, is
/// not a regular file (a FIFO or a device such as /dev/zero), or is larger than kMaxFileBytes.
std::string read_text_file(const std::filesystem::path& path);
/// Writes `contents` to a temporary file beside `path` (same directory), fsyncs it and
/// renames it over `path`, so readers see the old file or the new one, never a partial one.
/// New files get mode 0666 less the umask. An unwritable path is a moestat::Error naming it,
/// and leaves nothing behind (the temporary file is removed on every failure).
void write_file_atomically(const std::filesystem::path& path, std::string_view contents);

}  // namespace moestat::io
