// Per-token trace files (docs/formats.md). POSIX pwrite rather than streams: a chunk's
// header is written after its ids, at its own offset. With a reserve, chunks inside it are
// copied into a shared mapping instead (see TraceWriterOptions).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <moestat/error.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/output_file.hpp>
#include <moestat/io/trace_file.hpp>
#include <moestat/tensor_view.hpp>
#include <thread>
#include <vector>

namespace moestat::io {
namespace {

// NOTE: all integers little-endian; moestat only targets little-endian hosts (x86-64,
// aarch64), and checks the byte order mark below so a foreign file is refused, not misread.
constexpr std::array<char, 8> kMagic = {'M', 'O', 'E', 'T', 'R', 'A', 'C', 'E'};
// Version 2 states the id dtype and the header size; version 1 files (int32 ids, a 48-byte
// header) are still read.
constexpr std::uint32_t kFormatVersion = 2;
constexpr std::uint32_t kByteOrderMark = 0x01020304;
constexpr std::array<char, 4> kChunkMagic = {'P', 'A', 'S', 'S'};
// magic, version, byte order, 4 int64 topology fields (version 1 ends here), id dtype,
// header size
constexpr std::size_t kVersion1HeaderBytes = 8 + 4 + 4 + 4 * 8;
constexpr std::size_t kHeaderBytes = kVersion1HeaderBytes + 4 + 4;
// chunk magic, pass id, placement version, token count
constexpr std::size_t kChunkHeaderBytes = 4 + 8 + 8 + 8;
// Below this a chunk is copied by one thread: starting threads would cost more than they save.
constexpr std::size_t kParallelCopyBytes = std::size_t(4) << 20;

template <typename T>
void put(std::vector<char>& out, T value) {
  const auto* bytes = reinterpret_cast<const char*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof value);
}

template <typename T>
T take(std::span<const char> in, std::size_t& offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof value);
  offset += sizeof value;
  return value;
}

}  // namespace

TraceWriter::TraceWriter(const std::filesystem::path& path, const TraceHeader& header,
                         const TraceWriterOptions& options)
    : path_(path), options_(options), header_(header) {
  MOESTAT_CHECK(header.num_layers > 0 && header.top_k > 0 && header.num_physical_experts > 0 &&
                    header.num_logical_experts > 0,
                "trace {}: header needs positive sizes", path.string());
  // RDWR: mapped. The same rules on links as every other output (io/output_file.hpp).
  fd_ = io::open_output_in_place(path, O_RDWR | O_TRUNC);
  std::vector<char> bytes(kMagic.begin(), kMagic.end());
  put(bytes, kFormatVersion);
  put(bytes, kByteOrderMark);
  put(bytes, header.num_layers);
  put(bytes, header.num_logical_experts);
  put(bytes, header.num_physical_experts);
  put(bytes, header.top_k);
  put(bytes, std::uint32_t(DType::kInt32));
  put(bytes, std::uint32_t(kHeaderBytes));
  try {
    if (options_.reserve_bytes > 0) {
      const int failed = ::posix_fallocate(fd_, 0, off_t(options_.reserve_bytes));
      MOESTAT_CHECK(failed == 0, "cannot reserve {} bytes for trace file {}: {}",
                    options_.reserve_bytes, path.string(), std::strerror(failed));
      void* map = ::mmap(nullptr, options_.reserve_bytes, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_POPULATE, fd_, 0);
      MOESTAT_CHECK(map != MAP_FAILED, "cannot map the reserve of trace file {}: {}", path.string(),
                    std::strerror(errno));
      reserve_ = static_cast<char*>(map);
    }
    write_at(bytes.data(), bytes.size(), 0);
  } catch (...) {
    if (reserve_ != nullptr) ::munmap(reserve_, options_.reserve_bytes);
    ::close(fd_);
    throw;
  }
  end_ = bytes.size();
}

TraceWriter::~TraceWriter() {
  if (reserve_ != nullptr) {
    ::munmap(reserve_, options_.reserve_bytes);
    // The unused rest of the reserve goes; a failure leaves zeros, which readers skip.
    [[maybe_unused]] const int ignored = ::ftruncate(fd_, off_t(end_));
  }
  if (fd_ >= 0) ::close(fd_);
}

void TraceWriter::copy_into_reserve(const void* data, std::size_t bytes,
                                    std::uint64_t offset) const {
  if (bytes == 0) return;  // an empty span may have no data pointer at all
  const auto* source = static_cast<const char*>(data);
  char* target = reserve_ + offset;
  const std::size_t threads =
      bytes < kParallelCopyBytes ? 1 : std::max<std::size_t>(1, options_.copy_threads);
  const std::size_t share = bytes / threads;
  std::vector<std::jthread> helpers;
  for (std::size_t t = 1; t < threads; ++t) {
    const std::size_t begin = t * share;
    const std::size_t length = t + 1 == threads ? bytes - begin : share;
    helpers.emplace_back([=] { std::memcpy(target + begin, source + begin, length); });
  }
  std::memcpy(target, source, share);
}

void TraceWriter::write_at(const void* data, std::size_t bytes, std::uint64_t offset) {
  const auto* cursor = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t written = ::pwrite(fd_, cursor, bytes, off_t(offset));
    if (written < 0 && errno == EINTR) continue;
    MOESTAT_CHECK(written > 0, "cannot write trace file {}: {}", path_.string(),
                  written < 0 ? std::strerror(errno) : "no progress");
    cursor += written;
    bytes -= std::size_t(written);
    offset += std::uint64_t(written);
  }
}

void TraceWriter::append(std::int64_t pass_id, std::uint64_t placement_version,
                         std::span<const std::int32_t> ids) {
  append(pass_id, placement_version, ids, {});
}

void TraceWriter::append(std::int64_t pass_id, std::uint64_t placement_version,
                         std::span<const std::int32_t> first,
                         std::span<const std::int32_t> second) {
  const auto token_size = std::size_t(header_.num_layers * header_.top_k);
  const std::size_t entries = first.size() + second.size();
  MOESTAT_CHECK(entries % token_size == 0,
                "trace {}: {} ids are not a whole number of tokens of {} layers x top-{}",
                path_.string(), entries, header_.num_layers, header_.top_k);
  const std::uint64_t payload_offset = end_ + kChunkHeaderBytes;

  const std::size_t total = entries * sizeof(std::int32_t);
  std::vector<char> head(kChunkMagic.begin(), kChunkMagic.end());
  put(head, pass_id);
  put(head, placement_version);
  put(head, std::int64_t(entries / token_size));
  // The header goes last: until it lands, a reader sees zeros where the chunk starts.
  if (payload_offset + total <= options_.reserve_bytes) {
    copy_into_reserve(first.data(), first.size_bytes(), payload_offset);
    copy_into_reserve(second.data(), second.size_bytes(), payload_offset + first.size_bytes());
    copy_into_reserve(head.data(), head.size(), end_);
  } else {
    write_at(first.data(), first.size_bytes(), payload_offset);
    write_at(second.data(), second.size_bytes(), payload_offset + first.size_bytes());
    write_at(head.data(), head.size(), end_);
  }
  end_ = payload_offset + total;
}

std::int64_t TraceFile::num_tokens() const {
  const std::int64_t token_size = header.num_layers * header.top_k;
  std::int64_t tokens = 0;
  for (const TraceChunk& chunk : chunks) tokens += std::int64_t(chunk.ids.size()) / token_size;
  return tokens;
}

TraceFile read_trace_file(const std::filesystem::path& path) {
  const std::string bytes = read_text_file(path);
  return read_trace(std::as_bytes(std::span<const char>(bytes)), path.string());
}

TraceFile read_trace(std::span<const std::byte> data, std::string_view name) {
  const std::span<const char> bytes(reinterpret_cast<const char*>(data.data()), data.size());
  const std::string path(name);  // the name errors give
  MOESTAT_CHECK(bytes.size() >= kVersion1HeaderBytes &&
                    std::equal(kMagic.begin(), kMagic.end(), bytes.begin()),
                "{} is not a moestat trace file (bad magic or shorter than its header)", path);
  TraceFile out;
  std::size_t offset = kMagic.size();
  const auto version = take<std::uint32_t>(bytes, offset);
  MOESTAT_CHECK(version == 1 || version == kFormatVersion,
                "trace {}: format version {} is not supported (want 1 or {})", path, version,
                kFormatVersion);
  MOESTAT_CHECK(take<std::uint32_t>(bytes, offset) == kByteOrderMark,
                "trace {}: written with another byte order", path);
  out.header.num_layers = take<std::int64_t>(bytes, offset);
  out.header.num_logical_experts = take<std::int64_t>(bytes, offset);
  out.header.num_physical_experts = take<std::int64_t>(bytes, offset);
  out.header.top_k = take<std::int64_t>(bytes, offset);
  if (version >= 2) {
    MOESTAT_CHECK(bytes.size() >= kHeaderBytes, "trace {}: shorter than its header", path);
    const auto dtype = take<std::uint32_t>(bytes, offset);
    MOESTAT_CHECK(dtype == std::uint32_t(DType::kInt32),
                  "trace {}: id dtype code {} is not supported (want {}, int32)", path, dtype,
                  std::uint32_t(DType::kInt32));
    // Chunks start after the header, which a later version may have made longer.
    const auto header_bytes = take<std::uint32_t>(bytes, offset);
    MOESTAT_CHECK(header_bytes >= kHeaderBytes && header_bytes <= bytes.size(),
                  "trace {}: header size {} is outside [{}, file size]", path, header_bytes,
                  kHeaderBytes);
    offset = header_bytes;
  }
  const TraceHeader& header = out.header;
  constexpr std::int64_t kLimit = std::int64_t(1) << 31;
  MOESTAT_CHECK(header.num_layers > 0 && header.num_layers < kLimit && header.top_k > 0 &&
                    header.top_k < kLimit && header.num_physical_experts > 0 &&
                    header.num_physical_experts < kLimit && header.num_logical_experts > 0 &&
                    header.num_logical_experts <= header.num_physical_experts,
                "trace {}: implausible header (L={}, top_k={}, P={}, E={})", path,
                header.num_layers, header.top_k, header.num_physical_experts,
                header.num_logical_experts);
  const auto token_bytes = std::uint64_t(header.num_layers * header.top_k) * sizeof(std::int32_t);

  while (offset < bytes.size()) {
    // A cut file, or a chunk whose header the writer has not written yet (zeros).
    if (bytes.size() - offset < kChunkHeaderBytes ||
        std::all_of(bytes.begin() + std::ptrdiff_t(offset),
                    bytes.begin() + std::ptrdiff_t(offset + kChunkMagic.size()),
                    [](char byte) { return byte == 0; })) {
      out.truncated = true;
      break;
    }
    MOESTAT_CHECK(
        std::equal(kChunkMagic.begin(), kChunkMagic.end(), bytes.begin() + std::ptrdiff_t(offset)),
        "trace {}: no chunk marker at byte {}", path, offset);
    offset += kChunkMagic.size();
    TraceChunk chunk;
    chunk.pass_id = take<std::int64_t>(bytes, offset);
    chunk.placement_version = take<std::uint64_t>(bytes, offset);
    const auto num_tokens = take<std::int64_t>(bytes, offset);
    MOESTAT_CHECK(num_tokens >= 0, "trace {}: negative token count {} at byte {}", path, num_tokens,
                  offset - 8);
    const std::uint64_t remaining = bytes.size() - offset;
    if (std::uint64_t(num_tokens) > remaining / token_bytes) {
      out.truncated = true;  // the writer died inside this chunk
      break;
    }
    const std::size_t payload = std::size_t(std::uint64_t(num_tokens) * token_bytes);
    chunk.ids.resize(payload / sizeof(std::int32_t));
    if (payload > 0) std::memcpy(chunk.ids.data(), bytes.data() + offset, payload);
    offset += payload;
    for (std::int32_t id : chunk.ids) {
      MOESTAT_CHECK(id >= -1 && id < header.num_physical_experts,
                    "trace {}: id {} outside [-1, {}) in pass {}", path, id,
                    header.num_physical_experts, chunk.pass_id);
    }
    out.chunks.push_back(std::move(chunk));
  }
  return out;
}

}  // namespace moestat::io
