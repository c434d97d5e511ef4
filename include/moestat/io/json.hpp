// JSON read/write of snapshots, placements and SGLang-style count files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <moestat/placement.hpp>
#include <moestat/snapshot.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace moestat::io {

/// Logical counts as SGLang writes them: `{"logical_count": [L][E]}` or `[W][L][E]`.
struct LogicalCounts {
  std::int64_t window_size = 1;  ///< W; 1 for a 2-d file.
  std::int64_t num_layers = 0;
  std::int64_t num_experts = 0;
  bool has_window_axis = false;      ///< The file held [W][L][E] rather than [L][E].
  std::vector<std::int64_t> counts;  ///< [W, L, E] row-major.

  /// [L, E] summed over the window.
  std::vector<std::int64_t> totals() const;
};

/// moestat's own snapshot document (every field of Snapshot, plus "format" and "version";
/// its "logical_count" key is [W][L][E] as SGLang's, so SGLang tools can read it too).
std::string snapshot_to_json(const Snapshot& snapshot);
/// Parses a document written by snapshot_to_json; moestat::Error naming the bad field.
Snapshot snapshot_from_json(std::string_view text);

/// `{"physical_to_logical_map": [L][P]}`, exactly what SGLang's --init-expert-location takes.
std::string placement_to_json(const Placement& placement);
/// Parses `{"physical_to_logical_map": [L][P]}`. E is taken as max id + 1 (a valid map
/// holds every logical expert) unless `num_logical_experts` > 0 is given.
Placement placement_from_json(std::string_view text, std::int64_t num_logical_experts = 0);

/// `{"logical_count": ...}`, 3-d when counts.has_window_axis, else 2-d.
std::string logical_counts_to_json(const LogicalCounts& counts);
/// Reads `logical_count` [L][E] or [W][L][E] from a JSON object (other keys are ignored).
LogicalCounts logical_counts_from_json(std::string_view text);

/// Reads a whole file; moestat::Error naming the path when it cannot be read.
std::string read_text_file(const std::filesystem::path& path);
/// Writes `contents` to a temporary file beside `path`, fsyncs it and renames it over
/// `path`, so readers see the old file or the new one, never a partial one. An unwritable
/// path is a moestat::Error naming it, and leaves nothing behind.
void write_file_atomically(const std::filesystem::path& path, std::string_view contents);

}  // namespace moestat::io
