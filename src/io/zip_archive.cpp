// libzip behind ZipReader and zip_archive. Every size is checked before memory is allocated.
#include "zip_archive.hpp"

#include <zip.h>

#include <algorithm>
#include <memory>
#include <moestat/error.hpp>
#include <string_view>

namespace moestat::io::detail {
namespace {

// NOTE: deflate cannot expand data more than 1032 times, so a record that declares more is
// lying, and is refused before anything is allocated for it.
constexpr std::uint64_t kMaxDeflateRatio = 1032;
// 1980-01-03 UTC: a zip stores local DOS time from 1980 on, so stay clear of its start.
constexpr time_t kFixedTime = 315705600;

struct ErrorText {
  zip_error_t error;
  ErrorText() { zip_error_init(&error); }
  explicit ErrorText(int code) { zip_error_init_with_code(&error, code); }
  ~ErrorText() { zip_error_fini(&error); }
  ErrorText(const ErrorText&) = delete;
  ErrorText& operator=(const ErrorText&) = delete;
  std::string text() { return zip_error_strerror(&error); }
};

struct FileCloser {
  void operator()(zip_file_t* file) const { zip_fclose(file); }
};

}  // namespace

ZipReader::ZipReader(std::span<const std::byte> bytes) {
  ErrorText error;
  zip_source_t* source = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error.error);
  MOESTAT_CHECK(source != nullptr, "cannot read the zip archive: {}", error.text());
  archive_ = zip_open_from_source(source, ZIP_RDONLY, &error.error);
  if (archive_ == nullptr) {
    zip_source_free(source);
    MOESTAT_FAIL("not a zip archive ({})", error.text());
  }
  const zip_int64_t count = zip_get_num_entries(archive_, 0);
  for (zip_int64_t index = 0; index < count; ++index) {
    const char* name = zip_get_name(archive_, zip_uint64_t(index), ZIP_FL_ENC_RAW);
    names_.emplace_back(name == nullptr ? "" : name);
  }
  try {
    require_unique_names();
  } catch (const Error&) {
    zip_discard(archive_);  // the destructor does not run when the constructor throws
    throw;
  }
}

void ZipReader::require_unique_names() const {
  // libzip finds the first record of a name, torch.load's reader the last, so the two would
  // read different tensors (or pickles) from one file: refuse it rather than pick one.
  std::vector<std::string_view> sorted(names_.begin(), names_.end());
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  if (twice == sorted.end()) return;
  const auto times = std::count(sorted.begin(), sorted.end(), *twice);
  MOESTAT_FAIL(
      "the zip archive holds {} records named \"{}\": ambiguous (torch.load reads the last "
      "one), so it is refused",
      times, *twice);
}

ZipReader::~ZipReader() {
  if (archive_ != nullptr) zip_discard(archive_);
}

bool ZipReader::contains(const std::string& name) const noexcept {
  return zip_name_locate(archive_, name.c_str(), ZIP_FL_ENC_RAW) >= 0;
}

ZipReader::Record ZipReader::find(const std::string& name) const {
  const zip_int64_t index = zip_name_locate(archive_, name.c_str(), ZIP_FL_ENC_RAW);
  MOESTAT_CHECK(index >= 0, "the archive has no record {}", name);
  zip_stat_t stat;
  zip_stat_init(&stat);
  MOESTAT_CHECK(zip_stat_index(archive_, zip_uint64_t(index), 0, &stat) == 0,
                "cannot read record {}: {}", name, zip_strerror(archive_));
  constexpr zip_uint64_t kNeeded = ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD;
  MOESTAT_CHECK((stat.valid & kNeeded) == kNeeded, "record {} does not state its size", name);
  MOESTAT_CHECK(stat.comp_method == ZIP_CM_STORE || stat.comp_method == ZIP_CM_DEFLATE,
                "record {} uses zip compression method {} (want stored or deflate)", name,
                stat.comp_method);
  MOESTAT_CHECK(stat.comp_method == ZIP_CM_STORE ? stat.size == stat.comp_size
                                                 : stat.size / kMaxDeflateRatio <= stat.comp_size,
                "record {} declares {} bytes from {} compressed bytes", name, stat.size,
                stat.comp_size);
  return {zip_uint64_t(index), stat.size};
}

std::uint64_t ZipReader::size(const std::string& name) const { return find(name).size; }

std::vector<std::byte> ZipReader::read(const std::string& name, std::uint64_t max_bytes) const {
  const auto [index, size] = find(name);
  MOESTAT_CHECK(size <= max_bytes, "record {} declares {} bytes, more than the {} allowed", name,
                size, max_bytes);
  std::unique_ptr<zip_file_t, FileCloser> file(zip_fopen_index(archive_, index, 0));
  MOESTAT_CHECK(file != nullptr, "cannot open record {}: {}", name, zip_strerror(archive_));
  std::vector<std::byte> out(static_cast<std::size_t>(size));
  zip_uint64_t done = 0;
  while (done < size) {
    const zip_int64_t got = zip_fread(file.get(), out.data() + done, size - done);
    MOESTAT_CHECK(got > 0, "record {} is shorter than the {} bytes it declares{}", name, size,
                  got < 0 ? fmt::format(" ({})", zip_file_strerror(file.get())) : "");
    done += zip_uint64_t(got);
  }
  // Reading past the end makes libzip check the CRC of the whole record.
  std::byte extra{};
  const zip_int64_t tail = zip_fread(file.get(), &extra, 1);
  MOESTAT_CHECK(tail == 0, "record {} {}", name,
                tail > 0 ? "is longer than it declares"
                         : fmt::format("is damaged ({})", zip_file_strerror(file.get())));
  return out;
}

std::string zip_archive(std::span<const ZipRecord> records) {
  ErrorText error;
  zip_source_t* buffer = zip_source_buffer_create(nullptr, 0, 0, &error.error);
  MOESTAT_CHECK(buffer != nullptr, "cannot create a zip archive: {}", error.text());
  zip_source_keep(buffer);  // survives zip_close, which writes the archive into it
  std::unique_ptr<zip_source_t, decltype(&zip_source_free)> keep(buffer, zip_source_free);
  zip_t* archive = zip_open_from_source(buffer, ZIP_TRUNCATE, &error.error);
  MOESTAT_CHECK(archive != nullptr, "cannot create a zip archive: {}", error.text());
  for (const ZipRecord& record : records) {
    zip_source_t* data = zip_source_buffer(archive, record.data.data(), record.data.size(), 0);
    const zip_int64_t index =
        data == nullptr ? -1 : zip_file_add(archive, record.name.c_str(), data, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      if (data != nullptr) zip_source_free(data);
      const std::string why = zip_strerror(archive);
      zip_discard(archive);
      MOESTAT_FAIL("cannot add {} to a zip archive: {}", record.name, why);
    }
    // A fixed timestamp: the same bytes on every run.
    zip_set_file_compression(archive, zip_uint64_t(index), ZIP_CM_STORE, 0);
    zip_file_set_mtime(archive, zip_uint64_t(index), kFixedTime, 0);
  }
  if (zip_close(archive) != 0) {
    const std::string why = zip_strerror(archive);
    zip_discard(archive);
    MOESTAT_FAIL("cannot write a zip archive: {}", why);
  }
  zip_stat_t written;
  zip_stat_init(&written);
  MOESTAT_CHECK(zip_source_stat(buffer, &written) == 0 && (written.valid & ZIP_STAT_SIZE) != 0,
                "cannot read back the zip archive");
  MOESTAT_CHECK(zip_source_open(buffer) == 0, "cannot read back the zip archive");
  // Read in one go into a string of the archive's size: no chunk copies, no regrowth (a
  // dump's storages are tens of MB).
  std::string out(std::size_t(written.size), '\0');
  std::size_t filled = 0;
  while (filled < out.size()) {
    const zip_int64_t got =
        zip_source_read(buffer, out.data() + filled, zip_uint64_t(out.size() - filled));
    MOESTAT_CHECK(got > 0, "cannot read back the zip archive");
    filled += std::size_t(got);
  }
  zip_source_close(buffer);
  return out;
}

}  // namespace moestat::io::detail
