// moestat's own snapshot document (JSON): every field of a Snapshot.
#pragma once

#include <cstdint>
#include <moestat/snapshot.hpp>
#include <string>
#include <string_view>

namespace moestat::io {

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

}  // namespace moestat::io
