// torch .pt files: the zip container around the pickle (docs/formats.md).
#include <moestat/error.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/pt.hpp>
#include <unordered_map>

#include "pickle.hpp"
#include "read_budget.hpp"
#include "zip_archive.hpp"

namespace moestat::io {
namespace {

// The archive's top-level folder; torch.load accepts any name, torch.save writes "archive".
constexpr std::string_view kArchiveName = "archive";
// The serialization format version torch.save writes today (and torch 1.6 on reads).
constexpr std::string_view kFormatVersion = "3\n";

std::span<const std::byte> as_bytes(std::string_view text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

/// The folder holding data.pkl: torch names it after the file, or "archive". Every record
/// must be under it, as torch.load requires (a record elsewhere would be read by one reader
/// and not by another).
std::string archive_prefix(const detail::ZipReader& zip) {
  std::string prefix;
  for (const std::string& name : zip.names()) {
    const std::size_t slash = name.find('/');
    if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      prefix = name.substr(0, slash + 1);
      break;
    }
  }
  MOESTAT_CHECK(!prefix.empty(),
                "a zip archive without a data.pkl record is not a torch.save file");
  for (const std::string& name : zip.names()) {
    MOESTAT_CHECK(name.starts_with(prefix),
                  "the record {} is outside the archive's folder {} (torch.load refuses records "
                  "under two top-level folders)",
                  name, prefix);
  }
  return prefix;
}

/// Refuses bytes without a zip signature, saying whether they are a legacy torch.save file.
void require_zip_signature(std::span<const std::byte> bytes) {
  if (bytes.size() >= 4 && bytes[0] == std::byte{'P'} && bytes[1] == std::byte{'K'}) return;
  // PROTO 2-5 first: the bare pickle torch.save wrote before torch 1.6 (its storages follow
  // the pickle in a layout of its own), and still writes with
  // _use_new_zipfile_serialization=False.
  if (bytes.size() >= 2 && bytes[0] == std::byte{0x80} && bytes[1] >= std::byte{2} &&
      bytes[1] <= std::byte{5}) {
    MOESTAT_FAIL(
        "a legacy torch.save file (a bare pickle, protocol {}, no zip signature: torch before "
        "1.6, or _use_new_zipfile_serialization=False), which moestat does not read; load it "
        "and save it again with a current torch",
        int(bytes[1]));
  }
  MOESTAT_FAIL(
      "not a torch .pt file: no zip signature (files of torch.save before torch 1.6, or with "
      "_use_new_zipfile_serialization=False, are not supported)");
}

PtValue read_archive(std::span<const std::byte> bytes, const PtReadLimits& limits) {
  require_zip_signature(bytes);
  const detail::ZipReader zip(bytes);
  const std::string prefix = archive_prefix(zip);
  if (zip.contains(prefix + "byteorder")) {
    const std::vector<std::byte> order = zip.read(prefix + "byteorder", 16);
    const std::string_view text(reinterpret_cast<const char*>(order.data()), order.size());
    MOESTAT_CHECK(text == "little", "tensors stored {} endian are not supported", text);
  }
  detail::ReadBudget budget(bytes.size(), limits.max_expansion);
  const std::string pickle_name = prefix + "data.pkl";
  budget.spend(zip.size(pickle_name), "the pickle (data.pkl)");
  const std::vector<std::byte> pickle = zip.read(pickle_name, limits.max_pickle_bytes);

  struct Storage {
    DType dtype;
    std::int64_t numel;
    std::vector<std::byte> bytes;
  };
  std::unordered_map<std::string, Storage> storages;
  const detail::StorageLoader load = [&](const detail::StorageRef& ref) {
    auto found = storages.find(ref.key);
    if (found != storages.end()) {
      // torch.load keeps the first declaration and reads the bytes as its type: counts that
      // depend on which declaration a reader believes are refused.
      const Storage& first = found->second;
      MOESTAT_CHECK(first.dtype == ref.dtype && first.numel == ref.numel,
                    "storage {} is declared twice, as {} elements of {} and as {} of {}", ref.key,
                    first.numel, dtype_name(first.dtype), ref.numel, dtype_name(ref.dtype));
    } else {
      const std::size_t element = dtype_size(ref.dtype);
      MOESTAT_CHECK(std::uint64_t(ref.numel) <= bytes.size() / element + 1,
                    "storage {} of {} elements is larger than the file", ref.key, ref.numel);
      // Every storage is kept until the end, however little of it a view uses.
      budget.spend(std::uint64_t(ref.numel) * element, "the tensor storages");
      found = storages
                  .emplace(ref.key, Storage{ref.dtype, ref.numel,
                                            zip.read(prefix + "data/" + ref.key,
                                                     std::uint64_t(ref.numel) * element)})
                  .first;
    }
    return std::span<const std::byte>(found->second.bytes);
  };
  return detail::unpickle(pickle, load, budget, limits.max_depth);
}

}  // namespace

PtValue read_pt(std::span<const std::byte> bytes, std::string_view name,
                const PtReadLimits& limits) {
  try {
    return read_archive(bytes, limits);
  } catch (const Error& error) {
    throw error.with_context(std::string(name));
  }
}

PtValue read_pt_file(const std::filesystem::path& path, const PtReadLimits& limits) {
  const std::string bytes = read_text_file(path);
  return read_pt(as_bytes(bytes), path.string(), limits);
}

std::string pt_to_bytes(const PtValue& value) {
  std::vector<const HostTensor*> storages;
  const std::string pickle = detail::pickle(value, storages);
  const std::string prefix = std::string(kArchiveName) + "/";
  // The records in torch.save's order: data.pkl, byteorder, the storages, version.
  std::vector<detail::ZipRecord> records;
  records.push_back({prefix + "data.pkl", as_bytes(pickle)});
  records.push_back({prefix + "byteorder", as_bytes("little")});
  for (std::size_t key = 0; key < storages.size(); ++key) {
    records.push_back({prefix + "data/" + std::to_string(key), storages[key]->data});
  }
  records.push_back({prefix + "version", as_bytes(kFormatVersion)});
  return detail::zip_archive(records);
}

void write_pt_file(const std::filesystem::path& path, const PtValue& value) {
  write_file_atomically(path, pt_to_bytes(value));
}

}  // namespace moestat::io
