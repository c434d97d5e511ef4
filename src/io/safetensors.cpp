// safetensors: an 8-byte little-endian header size, a JSON header, then the tensor data
// (docs/formats.md). The header is checked whole before any tensor memory is allocated.
#include <algorithm>
#include <cstring>
#include <moestat/error.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/safetensors.hpp>
#include <optional>

#include "json_support.hpp"

namespace moestat::io {
namespace {

// The limit the reference implementation puts on headers.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::string_view kMetadataKey = "__metadata__";

std::string_view safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::kInt32:
      return "I32";
    case DType::kInt64:
      return "I64";
    case DType::kFloat32:
      return "F32";
    case DType::kFloat64:
      return "F64";
    case DType::kBool:
      return "BOOL";
    case DType::kUInt8:
      return "U8";
    case DType::kInt16:
      return "I16";
    case DType::kUInt16:
      return "U16";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType dtype : {DType::kInt32, DType::kInt64, DType::kFloat32, DType::kFloat64, DType::kBool,
                      DType::kUInt8, DType::kInt16, DType::kUInt16}) {
    if (safetensors_dtype(dtype) == name) return dtype;
  }
  return std::nullopt;
}

struct Entry {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin, end;
};

Entry parse_entry(const std::string& name, const detail::Json& info, std::uint64_t buffer_size) {
  MOESTAT_CHECK(info.is_object(), "tensor \"{}\": expected an object, got {}", name,
                detail::describe(info));
  const detail::Json& dtype = detail::require_key(info, "dtype");
  MOESTAT_CHECK(dtype.is_string(), "tensor \"{}\": dtype is {}", name, detail::describe(dtype));
  const auto parsed = parse_dtype(dtype.get<std::string>());
  MOESTAT_CHECK(parsed.has_value(),
                "tensor \"{}\": dtype {} is not supported (want BOOL, I32, "
                "I64, F32 or F64)",
                name, dtype.get<std::string>());
  Entry entry{name, *parsed, {}, 0, 0};
  const detail::Json& shape = detail::require_key(info, "shape");
  MOESTAT_CHECK(shape.is_array() && shape.size() <= 32,
                "tensor \"{}\": shape is not a list of "
                "at most 32 sizes",
                name);
  const std::uint64_t element = dtype_size(entry.dtype);
  for (const detail::Json& size : shape) {
    entry.shape.push_back(
        detail::read_int(size, "shape", 0, std::numeric_limits<std::int64_t>::max()));
  }
  const bool empty = std::find(entry.shape.begin(), entry.shape.end(), 0) != entry.shape.end();
  std::uint64_t numel = empty ? 0 : 1;
  for (std::int64_t size : entry.shape) {
    if (empty) break;
    // numel stays at most buffer_size / element, so the product cannot overflow.
    MOESTAT_CHECK(numel <= buffer_size / element / std::uint64_t(size),
                  "tensor \"{}\" of shape {} is larger than the file", name, shape.dump());
    numel *= std::uint64_t(size);
  }
  const detail::Json& offsets = detail::require_key(info, "data_offsets");
  MOESTAT_CHECK(offsets.is_array() && offsets.size() == 2,
                "tensor \"{}\": data_offsets is not "
                "[begin, end]",
                name);
  const auto max = std::int64_t(buffer_size);
  entry.begin = std::uint64_t(detail::read_int(offsets[0], "data_offsets", 0, max));
  entry.end = std::uint64_t(detail::read_int(offsets[1], "data_offsets", 0, max));
  MOESTAT_CHECK(entry.begin <= entry.end && entry.end - entry.begin == numel * element,
                "tensor \"{}\": data_offsets [{}, {}] do not hold {} elements of {}", name,
                entry.begin, entry.end, numel, dtype_name(entry.dtype));
  return entry;
}

NamedTensors parse(std::span<const std::byte> bytes) {
  MOESTAT_CHECK(bytes.size() >= 8, "not a safetensors file: shorter than 8 bytes");
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  MOESTAT_CHECK(header_size <= kMaxHeaderBytes && header_size <= bytes.size() - 8,
                "not a safetensors file: header of {} bytes in a file of {}", header_size,
                bytes.size());
  const std::string_view header(reinterpret_cast<const char*>(bytes.data() + 8),
                                std::size_t(header_size));
  MOESTAT_CHECK(!header.empty() && header.front() == '{',
                "not a safetensors file: the header does not start with '{{'");
  // In the header's order, which orders empty tensors. parse_json refuses a name twice (one
  // tensor to one reader and another to the next), as the reference reader does.
  std::vector<std::string> keys;
  const detail::Json document = detail::parse_json(header, keys);
  MOESTAT_CHECK(document.is_object(), "the header is not a JSON object");
  const std::span<const std::byte> buffer = bytes.subspan(8 + std::size_t(header_size));

  NamedTensors file;
  std::vector<Entry> entries;
  for (const std::string& key : keys) {
    // at(), not find().value(): a reference into the document, not through a temporary
    // iterator (GCC 13's -Wdangling-reference warns on the latter).
    const detail::Json& value = document.at(key);
    if (key == kMetadataKey) {
      MOESTAT_CHECK(value.is_object(), "__metadata__ is not an object");
      for (const auto& [meta_key, meta_value] : value.items()) {
        MOESTAT_CHECK(meta_value.is_string(), "__metadata__ \"{}\" is not a string", meta_key);
        file.metadata[meta_key] = meta_value.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(key, value, buffer.size()));
  }
  // The data must be tiled exactly: no overlap, no hole, nothing after the last tensor.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t covered = 0;
  for (const Entry& entry : entries) {
    MOESTAT_CHECK(entry.begin == covered,
                  "tensor \"{}\" starts at byte {} of the data, expected {}"
                  " (tensors must cover the data without overlap or hole)",
                  entry.name, entry.begin, covered);
    covered = entry.end;
  }
  MOESTAT_CHECK(covered == buffer.size(), "{} bytes of data follow the last tensor",
                buffer.size() - covered);
  for (Entry& entry : entries) {
    HostTensor tensor;
    tensor.dtype = entry.dtype;
    tensor.shape = std::move(entry.shape);
    const auto data =
        buffer.subspan(std::size_t(entry.begin), std::size_t(entry.end - entry.begin));
    tensor.data.assign(data.begin(), data.end());
    file.tensors.emplace_back(std::move(entry.name), std::move(tensor));
  }
  return file;
}

}  // namespace

NamedTensors read_safetensors(std::span<const std::byte> bytes, std::string_view name) {
  try {
    return parse(bytes);
  } catch (const Error& error) {
    throw error.with_context(std::string(name));
  }
}

NamedTensors read_safetensors_file(const std::filesystem::path& path) {
  const std::string bytes = read_text_file(path);
  return read_safetensors(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())),
                          path.string());
}

std::string safetensors_to_bytes(const NamedTensors& file) {
  detail::OrderedJson header = detail::OrderedJson::object();
  if (!file.metadata.empty()) header[std::string(kMetadataKey)] = file.metadata;
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : file.tensors) {
    MOESTAT_CHECK(!name.empty() && name != kMetadataKey, "tensor name \"{}\" is not allowed", name);
    MOESTAT_CHECK(!header.contains(name), "two tensors are named \"{}\"", name);
    const std::uint64_t bytes = std::uint64_t(tensor.numel()) * dtype_size(tensor.dtype);
    MOESTAT_CHECK(tensor.data.size() == bytes, "tensor \"{}\" holds {} bytes, not {}", name,
                  tensor.data.size(), bytes);
    header[name] = {{"dtype", safetensors_dtype(tensor.dtype)},
                    {"shape", tensor.shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const std::uint64_t size = text.size();
  std::memcpy(out.data(), &size, 8);
  out += text;
  for (const auto& [name, tensor] : file.tensors) {
    out.append(reinterpret_cast<const char*>(tensor.data.data()), tensor.data.size());
  }
  return out;
}

void write_safetensors_file(const std::filesystem::path& path, const NamedTensors& file) {
  write_file_atomically(path, safetensors_to_bytes(file));
}

}  // namespace moestat::io
