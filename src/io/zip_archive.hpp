// Zip archives in memory through libzip: the container of torch .pt files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

struct zip;

namespace moestat::io::detail {

/// Reads the records of a zip archive held in memory. Errors are moestat::Error without a
/// file name (the caller adds it).
class ZipReader {
 public:
  /// `bytes` must outlive the reader. moestat::Error when it is not a zip archive, or holds
  /// two records of one name.
  explicit ZipReader(std::span<const std::byte> bytes);
  ~ZipReader();
  ZipReader(const ZipReader&) = delete;
  ZipReader& operator=(const ZipReader&) = delete;

  /// Record names in archive order.
  const std::vector<std::string>& names() const noexcept { return names_; }
  bool contains(const std::string& name) const noexcept;
  /// The size a record declares (what read allocates). moestat::Error when it is absent,
  /// uses a compression other than stored or deflate, or declares more than its compressed
  /// bytes can hold.
  std::uint64_t size(const std::string& name) const;
  /// A record's bytes. moestat::Error as size(), when it declares more than `max_bytes`, or
  /// when it yields other than it declares.
  std::vector<std::byte> read(const std::string& name, std::uint64_t max_bytes) const;

 private:
  struct Record {
    std::uint64_t index;
    std::uint64_t size;
  };
  Record find(const std::string& name) const;
  /// moestat::Error naming a record name the archive holds more than once.
  void require_unique_names() const;

  struct zip* archive_ = nullptr;
  std::vector<std::string> names_;
};

struct ZipRecord {
  std::string name;
  std::span<const std::byte> data;
};

/// An archive of `records`, stored (not compressed) with a fixed timestamp so that equal
/// records give equal bytes.
std::string zip_archive(std::span<const ZipRecord> records);

}  // namespace moestat::io::detail
