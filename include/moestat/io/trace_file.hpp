// Per-token trace files: a self-describing header, then one chunk per pass, appended and
// flushed as passes drain, so the file is readable while it is written and a truncated
// file reads up to its last complete chunk. Layout in docs/formats.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

namespace moestat::io {

/// What a trace file describes: every chunk holds [tokens, num_layers, top_k] int32 ids.
struct TraceHeader {
  std::int64_t num_layers = 0;
  std::int64_t num_logical_experts = 0;
  std::int64_t num_physical_experts = 0;
  std::int64_t top_k = 0;
};

/// One pass's tokens.
struct TraceChunk {
  std::int64_t pass_id = 0;
  std::uint64_t placement_version = 0;
  /// [num_tokens, L, top_k] physical ids, -1 where a layer is dense, unrecorded, padding or
  /// the id was out of range.
  std::vector<std::int32_t> ids;
};

/// How a TraceWriter takes chunks in.
struct TraceWriterOptions {
  /// Bytes of file allocated and mapped when the writer opens. A chunk that lands inside them
  /// is copied into the mapping, where allocating the file's pages (what limits an appending
  /// write to a few GB/s) is already done, by `copy_threads` threads when it is large. Until
  /// the writer closes, the file is this long, zeros after the last chunk (readers stop
  /// there); closing cuts it to its chunks. Chunks past the reserve are appended with
  /// pwrite. 0: no reserve.
  std::uint64_t reserve_bytes = 0;
  /// Threads that copy one chunk of at least 4 MiB into the reserve (the calling thread
  /// included).
  unsigned copy_threads = 4;
};

/// Appends chunks to a new trace file. Not thread-safe; one writer per file. A chunk's ids
/// are written first and its header last, so a reader never takes a chunk in progress for
/// a whole one.
class TraceWriter {
 public:
  /// Creates (truncates) `path`, allocates the reserve and writes the header; moestat::Error
  /// naming the path when it cannot be written or the reserve cannot be allocated.
  TraceWriter(const std::filesystem::path& path, const TraceHeader& header,
              const TraceWriterOptions& options = {});
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  /// Appends one chunk: `ids` holds num_tokens * L * top_k entries. Flushed before return.
  void append(std::int64_t pass_id, std::uint64_t placement_version,
              std::span<const std::int32_t> ids);
  /// Like append, but the ids arrive as two pieces (the wrap-around of a ring buffer).
  void append(std::int64_t pass_id, std::uint64_t placement_version,
              std::span<const std::int32_t> first, std::span<const std::int32_t> second);

  const TraceHeader& header() const noexcept { return header_; }

 private:
  void write_at(const void* data, std::size_t bytes, std::uint64_t offset);
  /// Copies into the reserve at `offset`, in parallel when large.
  void copy_into_reserve(const void* data, std::size_t bytes, std::uint64_t offset) const;

  std::filesystem::path path_;
  int fd_ = -1;
  TraceWriterOptions options_;
  char* reserve_ = nullptr;  // the mapped first options_.reserve_bytes of the file
  std::uint64_t end_ = 0;    // file size once every appended chunk is written
  TraceHeader header_;
};

/// A whole trace file read back.
struct TraceFile {
  TraceHeader header;
  std::vector<TraceChunk> chunks;
  bool truncated = false;  ///< The file ended inside a chunk; that chunk was left out.

  std::int64_t num_tokens() const;
};

/// Reads a trace file; a bad header or an impossible chunk size is a moestat::Error naming
/// the file and the offset. Sizes are checked against the file before any allocation.
TraceFile read_trace_file(const std::filesystem::path& path);
/// Reads a trace held in memory; `name` stands for the file in error messages.
TraceFile read_trace(std::span<const std::byte> bytes, std::string_view name = "<memory>");

}  // namespace moestat::io
