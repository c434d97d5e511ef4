// GGUF (llama.cpp's file format): the header, and the per-expert counts of imatrix files.
//
// Why hand-written: the only GGUF readers in C++ are ggml's own (gguf.cpp, part of ggml,
// which moestat must not need: its io layer links nothing of llama.cpp), and they read the
// tensor data of a model into memory. moestat needs the header (metadata, tensor names,
// shapes, types and offsets) and a few small F32 tensors. The layout is simple — little-endian
// integers, length-prefixed strings, typed metadata values, one info per tensor, then aligned
// data — so a reader that checks every length against the bytes left and charges every
// allocation to the file's budget (16 times its size plus 1 MiB, as every moestat reader) is a
// few hundred lines that a fuzzer (tests/fuzz/gguf_fuzzer.cpp) covers completely.
#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <moestat/error.hpp>
#include <moestat/io/gguf.hpp>
#include <moestat/io/read_bounds.hpp>
#include <set>

#include "read_budget.hpp"

namespace moestat::io {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is read on little-endian hosts");

// GGUF's metadata value types.
enum ValueType : std::uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
constexpr std::array<std::string_view, 13> kValueTypeNames{
    "uint8", "int8", "uint16", "int16",  "uint32", "int32",  "float32",
    "bool",  "str",  "array",  "uint64", "int64",  "float64"};

constexpr std::uint32_t kGgmlF32 = 0;
constexpr std::uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr std::uint64_t kDefaultAlignment = 32;
// What one kept metadata entry or tensor info costs besides its characters: the object, twice
// (a vector grows by doubling), and the key's node in the set of keys seen or the shape.
constexpr std::uint64_t kMetadataEntryCost = 2 * sizeof(std::pair<std::string, GgufValue>) + 64;
constexpr std::uint64_t kTensorEntryCost = 2 * sizeof(GgufTensorInfo) + 4 * sizeof(std::int64_t);
// A model's header (its vocabulary among the metadata) is a few MB; a model file is GBs.
constexpr std::uint64_t kMaxHeaderFileBytes = std::uint64_t(64) << 20;

/// The header's bytes, read in order; every read checks the bytes left first.
class Cursor {
 public:
  explicit Cursor(std::span<const std::byte> bytes) : bytes_(bytes) {}

  template <class T>
  T scalar(std::string_view what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, bytes_.data() + position_, sizeof(T));
    position_ += sizeof(T);
    return value;
  }
  std::string_view string(std::string_view what) {
    const auto size = scalar<std::uint64_t>(what);
    need(size, what);
    const std::string_view out(reinterpret_cast<const char*>(bytes_.data() + position_),
                               std::size_t(size));
    position_ += size;
    return out;
  }
  void skip(std::uint64_t size, std::string_view what) {
    need(size, what);
    position_ += size;
  }
  std::uint64_t left() const noexcept { return bytes_.size() - position_; }
  std::uint64_t position() const noexcept { return position_; }

 private:
  void need(std::uint64_t size, std::string_view what) const {
    MOESTAT_CHECK(size <= left(), "the file ends inside {} (at byte {}: {} bytes wanted, {} left)",
                  what, position_, size, left());
  }
  std::span<const std::byte> bytes_;
  std::uint64_t position_ = 0;
};

std::string_view value_type_name(std::uint32_t type) {
  return type < kValueTypeNames.size() ? kValueTypeNames[type] : "unknown";
}

/// The size of a fixed-size value type; 0 for strings and arrays.
std::uint64_t fixed_size(std::uint32_t type) {
  switch (type) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32:
      return 4;
    case kU64:
    case kI64:
    case kF64:
      return 8;
    default:
      return 0;
  }
}

/// A scalar of a fixed-size type as text, with its integer value when it is one that fits.
GgufValue scalar_value(Cursor& in, std::uint32_t type, std::string_view what) {
  GgufValue out{.type = type};
  const auto integer = [&](auto value) {
    if (std::in_range<std::int64_t>(value)) out.integer = std::int64_t(value);
    out.text = fmt::format("{}", value);
  };
  switch (type) {
    case kU8:
      return integer(in.scalar<std::uint8_t>(what)), out;
    case kI8:
      return integer(in.scalar<std::int8_t>(what)), out;
    case kU16:
      return integer(in.scalar<std::uint16_t>(what)), out;
    case kI16:
      return integer(in.scalar<std::int16_t>(what)), out;
    case kU32:
      return integer(in.scalar<std::uint32_t>(what)), out;
    case kI32:
      return integer(in.scalar<std::int32_t>(what)), out;
    case kU64:
      return integer(in.scalar<std::uint64_t>(what)), out;
    case kI64:
      return integer(in.scalar<std::int64_t>(what)), out;
    case kF32:
      return out.text = fmt::format("{}", in.scalar<float>(what)), out;
    case kF64:
      return out.text = fmt::format("{}", in.scalar<double>(what)), out;
    case kBool: {
      const auto byte = in.scalar<std::uint8_t>(what);
      MOESTAT_CHECK(byte <= 1, "{} is a bool of value {} (want 0 or 1)", what, byte);
      return out.text = byte != 0 ? "true" : "false", out;
    }
    default:
      MOESTAT_FAIL("{} has value type {} (GGUF's types are 0 to 12)", what, type);
  }
}

/// An array's elements are skipped (moestat needs none of them: they are a model's
/// vocabulary and the like), each string's length checked against the bytes.
GgufValue array_value(Cursor& in, std::string_view what) {
  const auto type = in.scalar<std::uint32_t>(what);
  const auto count = in.scalar<std::uint64_t>(what);
  MOESTAT_CHECK(type != kArray, "{} is an array of arrays, which GGUF readers do not take", what);
  if (type == kString) {
    // Each element is at least its 8-byte length: a count beyond that is refused at once.
    MOESTAT_CHECK(count <= in.left() / 8, "{} declares {} strings, more than the file holds", what,
                  count);
    for (std::uint64_t i = 0; i < count; ++i) (void)in.string(what);
  } else {
    const std::uint64_t size = fixed_size(type);
    MOESTAT_CHECK(size != 0, "{} is an array of value type {} (GGUF's types are 0 to 12)", what,
                  type);
    MOESTAT_CHECK(count <= in.left() / size,
                  "{} declares {} elements of {}, more than the file "
                  "holds",
                  what, count, value_type_name(type));
    in.skip(count * size, what);
  }
  return {.type = kArray, .text = fmt::format("[{} x {}]", count, value_type_name(type))};
}

GgufValue read_value(Cursor& in, std::string_view key, detail::ReadBudget& budget) {
  const std::string what = fmt::format("metadata \"{}\"", key);
  const auto type = in.scalar<std::uint32_t>(what);
  if (type == kArray) return array_value(in, what);
  if (type != kString) return scalar_value(in, type, what);
  const std::string_view text = in.string(what);
  budget.spend(text.size(), what);
  return {.type = kString, .text = std::string(text)};
}

std::uint64_t alignment_of(const GgufHeader& header) {
  const GgufValue* value = header.find("general.alignment");
  if (value == nullptr) return kDefaultAlignment;
  MOESTAT_CHECK(value->type == kU32 && value->integer && *value->integer > 0 &&
                    std::has_single_bit(std::uint64_t(*value->integer)),
                "general.alignment is {} {} (want a uint32 power of two)",
                value_type_name(value->type), value->text);
  return std::uint64_t(*value->integer);
}

GgufTensorInfo read_tensor_info(Cursor& in, std::uint64_t index, detail::ReadBudget& budget) {
  const std::string what = fmt::format("tensor info {}", index);
  GgufTensorInfo info;
  const std::string_view name = in.string(what);
  budget.spend(name.size() + kTensorEntryCost, what);
  info.name = name;
  const std::string named = fmt::format("tensor \"{}\"", info.name);
  const auto dims = in.scalar<std::uint32_t>(named);
  MOESTAT_CHECK(dims >= 1 && dims <= kMaxDims, "{} has {} dimensions (want 1 to {})", named, dims,
                kMaxDims);
  std::uint64_t numel = 1;
  for (std::uint32_t d = 0; d < dims; ++d) {
    const auto size = in.scalar<std::uint64_t>(named);
    MOESTAT_CHECK(
        size <= std::uint64_t(std::numeric_limits<std::int64_t>::max()) &&
            (size == 0 || numel <= std::uint64_t(std::numeric_limits<std::int64_t>::max()) / size),
        "{} has {} elements in dimension {}: its size overflows int64", named, size, d);
    numel *= size;
    info.shape.push_back(std::int64_t(size));
  }
  info.type = in.scalar<std::uint32_t>(named);
  info.offset = in.scalar<std::uint64_t>(named);
  return info;
}

/// The file's data from `offset` for `size` bytes; moestat::Error naming `what` when they are
/// not all in the file.
std::span<const std::byte> data_of(std::span<const std::byte> bytes, const GgufHeader& header,
                                   const GgufTensorInfo& tensor, std::uint64_t size) {
  const std::uint64_t begin = header.data_offset + tensor.offset;
  MOESTAT_CHECK(
      tensor.offset <= bytes.size() && begin <= bytes.size() && size <= bytes.size() - begin,
      "tensor \"{}\": its {} bytes at data offset {} go beyond the file's {} bytes", tensor.name,
      size, tensor.offset, bytes.size());
  return bytes.subspan(std::size_t(begin), std::size_t(size));
}

/// "blk.N.<...>_exps.weight.counts" -> N; nullopt for any other name.
std::optional<std::int64_t> expert_counts_layer(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  constexpr std::string_view kSuffix = "_exps.weight.counts";
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return std::nullopt;
  name.remove_prefix(kPrefix.size());
  const std::size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot + 1 + kSuffix.size() > name.size()) {
    return std::nullopt;
  }
  std::int64_t layer = -1;
  const auto [end, error] = std::from_chars(name.data(), name.data() + dot, layer);
  if (error != std::errc{} || end != name.data() + dot) return std::nullopt;
  return layer;
}

// llama.cpp names no more blocks than this (LLAMA_MAX_LAYERS is 512).
constexpr std::int64_t kMaxBlocks = 65536;

/// One expert tensor's counts: F32 [1, E], whole, finite, >= 0.
std::vector<std::int64_t> counts_of(std::span<const std::byte> bytes, const GgufHeader& header,
                                    const GgufTensorInfo& tensor, detail::ReadBudget& budget) {
  const std::string named = fmt::format("tensor \"{}\"", tensor.name);
  MOESTAT_CHECK(tensor.type == kGgmlF32, "{} has ggml type {} (llama-imatrix writes F32, 0)", named,
                tensor.type);
  MOESTAT_CHECK(tensor.shape.size() == 2 && tensor.shape[0] == 1 && tensor.shape[1] >= 1,
                "{} has shape [{}] (llama-imatrix writes [1, n_expert])", named,
                fmt::join(tensor.shape, ", "));
  const auto experts = std::uint64_t(tensor.shape[1]);
  const std::span<const std::byte> data = data_of(bytes, header, tensor, experts * 4);
  budget.spend(experts * sizeof(std::int64_t), named);
  std::vector<std::int64_t> out(experts);
  for (std::uint64_t e = 0; e < experts; ++e) {
    float value;
    std::memcpy(&value, data.data() + e * 4, 4);
    // Whole, and below 2^63 so that it converts; an F32 count is exact up to 2^24.
    MOESTAT_CHECK(
        std::isfinite(value) && value >= 0 && value == std::floor(value) && value < 0x1p63f,
        "{}[{}] is {} (a count must be a whole number >= 0)", named, e, value);
    out[e] = std::int64_t(value);
  }
  return out;
}

/// L: `<arch>.block_count` when the file says it (it must hold every block counted), else the
/// highest block + 1.
std::int64_t num_layers_of(const GgufHeader& header, std::int64_t highest_block) {
  const GgufValue* arch = header.find("general.architecture");
  if (arch == nullptr || arch->type != kString) return highest_block + 1;
  const GgufValue* blocks = header.find(arch->text + ".block_count");
  if (blocks == nullptr) return highest_block + 1;
  MOESTAT_CHECK(
      blocks->integer && *blocks->integer > highest_block && *blocks->integer <= kMaxBlocks,
      "{}.block_count is {}, but the file counts experts of block {}", arch->text, blocks->text,
      highest_block);
  return *blocks->integer;
}

GgufHeader parse_header(std::span<const std::byte> bytes, detail::ReadBudget& budget) {
  Cursor in(bytes);
  const auto magic = in.scalar<std::uint32_t>("the magic");
  MOESTAT_CHECK(magic == 0x46554747, "not a GGUF file (it does not start with \"GGUF\")");
  GgufHeader header;
  header.version = in.scalar<std::uint32_t>("the version");
  MOESTAT_CHECK(header.version != 0x03000000 && header.version != 0x02000000,
                "a big-endian GGUF file, which moestat does not read");
  MOESTAT_CHECK(header.version == 2 || header.version == 3,
                "GGUF version {} (moestat reads versions 2 and 3)", header.version);
  const auto tensors = in.scalar<std::uint64_t>("the tensor count");
  const auto keys = in.scalar<std::uint64_t>("the metadata count");
  // The smallest key is 8 + 4 bytes plus a 1-byte value, the smallest tensor info 28 bytes:
  // counts beyond that are refused before anything is reserved.
  MOESTAT_CHECK(keys <= in.left() / 13, "{} metadata entries declared, more than the file holds",
                keys);
  std::set<std::string_view> seen;  // views of the bytes: a set, not a scan per key
  for (std::uint64_t i = 0; i < keys; ++i) {
    const std::string_view key = in.string(fmt::format("metadata key {}", i));
    budget.spend(key.size() + kMetadataEntryCost, "the metadata");
    GgufValue value = read_value(in, key, budget);
    MOESTAT_CHECK(seen.insert(key).second, "metadata \"{}\" appears twice", key);
    header.metadata.emplace_back(std::string(key), std::move(value));
  }
  MOESTAT_CHECK(tensors <= in.left() / 28, "{} tensors declared, more than the file holds",
                tensors);
  const std::uint64_t alignment = alignment_of(header);
  for (std::uint64_t i = 0; i < tensors; ++i) {
    GgufTensorInfo info = read_tensor_info(in, i, budget);
    MOESTAT_CHECK(info.offset % alignment == 0,
                  "tensor \"{}\" starts at data offset {}, not a multiple of the alignment {}",
                  info.name, info.offset, alignment);
    header.tensors.push_back(std::move(info));
  }
  header.data_offset = (in.position() + alignment - 1) / alignment * alignment;
  return header;
}

template <class F>
auto naming(std::string_view name, F&& read) {
  try {
    return read();
  } catch (const Error& error) {
    throw error.with_context(std::string(name));
  }
}

}  // namespace

const GgufValue* GgufHeader::find(std::string_view key) const noexcept {
  const auto found = std::find_if(metadata.begin(), metadata.end(),
                                  [&](const auto& entry) { return entry.first == key; });
  return found == metadata.end() ? nullptr : &found->second;
}

GgufHeader read_gguf_header(std::span<const std::byte> bytes, std::string_view name) {
  return naming(name, [&] {
    detail::ReadBudget budget(bytes.size(), kReadExpansion);
    return parse_header(bytes, budget);
  });
}

GgufHeader read_gguf_header_file(const std::filesystem::path& path) {
  // O_NONBLOCK and a regular file only, as read_text_file: a FIFO must not hang the read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  MOESTAT_CHECK(fd >= 0, "cannot read {}: {}", path.string(), std::strerror(errno));
  struct stat info {};
  std::string prefix;
  const bool regular = ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode);
  if (regular) {
    prefix.resize(
        std::size_t(std::min<std::uint64_t>(std::uint64_t(info.st_size), kMaxHeaderFileBytes)));
    std::size_t got = 0;
    while (got < prefix.size()) {
      const ssize_t n = ::pread(fd, prefix.data() + got, prefix.size() - got, off_t(got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += std::size_t(n);
    }
    prefix.resize(got);
  }
  ::close(fd);
  MOESTAT_CHECK(regular, "cannot read {}: not a regular file", path.string());
  try {
    return read_gguf_header(std::as_bytes(std::span(prefix)), path.string());
  } catch (const Error& error) {
    const bool cut = prefix.size() == kMaxHeaderFileBytes &&
                     error.message().find("the file ends inside") != std::string::npos;
    MOESTAT_CHECK(!cut,
                  "{}: its GGUF header goes beyond the first {} bytes, all moestat reads "
                  "of a model",
                  path.string(), kMaxHeaderFileBytes);
    throw;
  }
}

std::optional<std::uint64_t> ggml_tensor_bytes(const GgufTensorInfo& tensor) {
  // ggml's type traits (ggml.c): {block size in elements, bytes per block}, by type id; the
  // same as gguf-py's GGML_QUANT_SIZES of the llama.cpp llama-cpp-python 0.3.36 vendors.
  struct Block {
    std::uint32_t type;
    std::uint64_t elements, bytes;
  };
  static constexpr std::array<Block, 35> kBlocks{{
      {0, 1, 4},      {1, 1, 2},      {2, 32, 18},   {3, 32, 20},    {6, 32, 22},    {7, 32, 24},
      {8, 32, 34},    {9, 32, 36},    {10, 256, 84}, {11, 256, 110}, {12, 256, 144}, {13, 256, 176},
      {14, 256, 210}, {15, 256, 292}, {16, 256, 66}, {17, 256, 74},  {18, 256, 98},  {19, 256, 50},
      {20, 32, 18},   {21, 256, 110}, {22, 256, 82}, {23, 256, 136}, {24, 1, 1},     {25, 1, 2},
      {26, 1, 4},     {27, 1, 8},     {28, 1, 8},    {29, 256, 56},  {30, 1, 2},     {34, 256, 54},
      {35, 256, 66},  {39, 32, 17},   {40, 64, 36},  {41, 128, 18},  {42, 64, 18},
  }};
  const auto* block = std::find_if(kBlocks.begin(), kBlocks.end(),
                                   [&](const Block& b) { return b.type == tensor.type; });
  if (block == kBlocks.end() || tensor.shape.empty()) return std::nullopt;
  // A row (ne[0]) is whole blocks; the rows multiply. Sizes were checked to fit int64.
  const auto row = std::uint64_t(tensor.shape[0]);
  if (row % block->elements != 0) return std::nullopt;
  std::uint64_t rows = 1;
  for (std::size_t d = 1; d < tensor.shape.size(); ++d) rows *= std::uint64_t(tensor.shape[d]);
  const std::uint64_t row_bytes = row / block->elements * block->bytes;
  if (rows != 0 && row_bytes > std::numeric_limits<std::uint64_t>::max() / rows) {
    return std::nullopt;
  }
  return row_bytes * rows;
}

CountWindow imatrix_counts(std::span<const std::byte> bytes, std::string_view name) {
  return naming(name, [&] {
    detail::ReadBudget budget(bytes.size(), kReadExpansion);
    const GgufHeader header = parse_header(bytes, budget);
    // Per block, its counts and the tensor they came from (for the error when two disagree).
    std::map<std::int64_t, std::pair<std::vector<std::int64_t>, std::string_view>> layers;
    for (const GgufTensorInfo& tensor : header.tensors) {
      const std::optional<std::int64_t> layer = expert_counts_layer(tensor.name);
      if (!layer) continue;
      MOESTAT_CHECK(*layer >= 0 && *layer < kMaxBlocks, "tensor \"{}\": block {} (want 0 to {})",
                    tensor.name, *layer, kMaxBlocks - 1);
      std::vector<std::int64_t> counts = counts_of(bytes, header, tensor, budget);
      const auto [it, added] = layers.try_emplace(*layer, std::move(counts), tensor.name);
      MOESTAT_CHECK(added || it->second.first == counts,
                    "tensors \"{}\" and \"{}\" of block {} count different routings (the expert "
                    "tensors of one layer see the same tokens)",
                    it->second.second, tensor.name, *layer);
    }
    MOESTAT_CHECK(!layers.empty(),
                  "no per-expert counts in this GGUF file (no tensor "
                  "blk.N.ffn_*_exps.weight.counts: not an imatrix of a MoE model{})",
                  header.find("imatrix.chunk_count") == nullptr ? ", nor an imatrix at all" : "");
    const auto experts = std::int64_t(layers.begin()->second.first.size());
    CountWindow out{.num_layers = num_layers_of(header, layers.rbegin()->first),
                    .num_experts = experts};
    budget.spend(std::uint64_t(out.pass_size()) * sizeof(std::int64_t), "the counts");
    out.counts.assign(std::size_t(out.pass_size()), 0);
    for (const auto& [layer, entry] : layers) {
      MOESTAT_CHECK(std::int64_t(entry.first.size()) == experts,
                    "tensor \"{}\" counts {} experts, but block {} counts {} (moestat's counts "
                    "have one expert count for every layer)",
                    entry.second, entry.first.size(), layers.begin()->first, experts);
      std::copy(entry.first.begin(), entry.first.end(),
                out.counts.begin() + std::ptrdiff_t(layer * experts));
    }
    return out;
  });
}

}  // namespace moestat::io
