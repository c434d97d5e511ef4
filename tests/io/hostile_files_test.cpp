// Files that are ambiguous, misnamed, damaged or whose counts overflow: each is refused with
// a moestat::Error that names the file and says why (issue 14, items 7, 8, 10 and 11).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <moestat/io/pt.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/io/trace_file.hpp>
#include <moestat/snapshot.hpp>
#include <string>

#include "io/test_support.hpp"
#include "io/zip_archive.hpp"

namespace moestat::test {
namespace {

using namespace std::string_literals;  // pickles and headers hold NUL bytes

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

std::span<const std::byte> bytes_of(const std::string& text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

/// Every occurrence of `from` in `text` replaced by `to` (of the same length, so a zip's
/// offsets stay right: the names live in each local header and in the central directory).
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
    text.replace(at, from.size(), to);
  }
  return text;
}

/// A .pt archive around hand-made records.
std::string archive(const std::vector<std::pair<std::string, std::string>>& records) {
  std::vector<io::detail::ZipRecord> zip;
  for (const auto& [name, data] : records) zip.push_back({name, bytes_of(data)});
  return io::detail::zip_archive(zip);
}

// {"n": 1} and {"n": 2}, protocol 2 as torch.save writes.
const std::string kPickleOne = "\x80\x02}X\x01\x00\x00\x00nK\x01s."s;
const std::string kPickleTwo = "\x80\x02}X\x01\x00\x00\x00nK\x02s."s;

// ---- item 8: what torch.load and moestat would read differently ----

TEST(AmbiguousPt, TwoRecordsOfOneNameAreRefusedNamingTheRecord) {
  // Written under distinct names of one length, then renamed alike in the bytes.
  const std::string unique = archive({{"x/data.pkl", kPickleOne}, {"x/data.pkX", kPickleTwo}});
  EXPECT_EQ(io::read_pt(bytes_of(unique)).at("n").as_int(), 1);
  const std::string twice = replaced(unique, "x/data.pkX", "x/data.pkl");
  expect_error([&] { io::read_pt(bytes_of(twice), "dup.pt"); },
               {"dup.pt: ", "2 records named \"x/data.pkl\"", "ambiguous"});
  // A storage record twice, which the pickle reads through its persistent id.
  const std::string storages =
      replaced(archive({{"x/data.pkl", kPickleOne}, {"x/data/0", "a"}, {"x/data/1", "b"}}),
               "x/data/1", "x/data/0");
  expect_error([&] { io::read_pt(bytes_of(storages)); }, {"records named \"x/data/0\""});
}

TEST(AmbiguousPt, ADictSettingOneKeyTwiceIsRefusedNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> pickles = {
      // SETITEM twice
      {"\x80\x02}X\x01\x00\x00\x00nK\x01sX\x01\x00\x00\x00nK\x02s."s, "\"n\""},
      // SETITEMS with two equal keys
      {"\x80\x02}(X\x01\x00\x00\x00nK\x01X\x01\x00\x00\x00nK\x02u."s, "\"n\""},
      // int keys
      {"\x80\x02}(K\x07K\x01K\x07K\x02u."s, "key 7"},
      // one key object twice, through the memo
      {"\x80\x02}(X\x01\x00\x00\x00nq\x00K\x01h\x00K\x02u."s, "\"n\""},
      // a nested dict
      {"\x80\x02}X\x01\x00\x00\x00"
       "d}(K\x01K\x01K\x01K\x02us."s,
       "key 1"},
  };
  for (const auto& [pickle, key] : pickles) {
    expect_error(
        [&] {
          io::read_pt(bytes_of(archive({{"x/data.pkl", pickle}})), "keys.pt");
        },
        {"keys.pt: ", key, "more than once", "ambiguous"});
  }
  // The str "1" and the int 1 are different keys.
  const std::string distinct =
      "\x80\x02}(X\x01\x00\x00\x00"
      "1K\x01K\x01K\x02u."s;
  EXPECT_EQ(io::read_pt(bytes_of(archive({{"x/data.pkl", distinct}}))).dict().size(), 2u);
}

// ---- item 11: the format by signature, then extension, then shape ----

TEST(FormatDetection, ALegacyTorchFileSaysSo) {
  ScratchDir dir;
  // torch.save(..., _use_new_zipfile_serialization=False) begins with PROTO 2 and a magic.
  const std::string legacy =
      "\x80\x02\x8a\x0al\xfc\x9c"
      "F\xf9 j\xa8P\x19.\x80\x02M\xe9\x03."s;
  for (const std::string name : {"old.pt", "old.bin"}) {
    write_bytes(dir.path() / name, legacy);
    EXPECT_EQ(io::detect_file_format(dir.path() / name), io::FileFormat::kPt) << name;
    expect_error([&] { io::read_counts(dir.path() / name); },
                 {name, "legacy torch.save file", "no zip signature"});
  }
}

TEST(FormatDetection, ASafetensorsHeaderTooLongForTheFileIsASafetensorsError) {
  ScratchDir dir;
  const std::string header = "{\"t\": {}}";
  std::string bytes(8, '\0');
  const std::uint64_t claimed = 1000;
  std::memcpy(bytes.data(), &claimed, 8);
  for (const std::string name : {"bad.safetensors", "bad.bin", "bad.json"}) {
    write_bytes(dir.path() / name, bytes + header);
    EXPECT_EQ(io::detect_file_format(dir.path() / name), io::FileFormat::kSafetensors) << name;
    expect_error([&] { io::read_counts(dir.path() / name); },
                 {name, "not a safetensors file: header of 1000 bytes"});
  }
  // An absurd size whose bytes are all text is still safetensors by its name.
  write_bytes(dir.path() / "text.safetensors", "        {}");
  expect_error([&] { io::read_counts(dir.path() / "text.safetensors"); },
               {"not a safetensors file"});
}

TEST(FormatDetection, ATraceWithADamagedMagicIsATraceError) {
  ScratchDir dir;
  {
    io::TraceWriter writer(
        dir.path() / "good.bin",
        {.num_layers = 1, .num_logical_experts = 2, .num_physical_experts = 2, .top_k = 1});
  }
  std::ifstream in(dir.path() / "good.bin", std::ios::binary);
  std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  bytes[0] = 'X';
  for (const std::string name : {"bad.trace", "bad.bin"}) {
    write_bytes(dir.path() / name, bytes);
    EXPECT_EQ(io::detect_file_format(dir.path() / name), io::FileFormat::kTrace) << name;
    expect_error([&] { io::read_trace_file(dir.path() / name); }, {name, "bad magic"});
  }
}

TEST(FormatDetection, JsonIsJsonAndAnythingElseIsNamedUnknown) {
  ScratchDir dir;
  // '{' at byte 8 is no safetensors header when the 8 bytes before it are text.
  write_bytes(dir.path() / "doc", "{\"abc\": {\"logical_count\": 1}}");
  EXPECT_EQ(io::detect_file_format(dir.path() / "doc"), io::FileFormat::kJson);
  write_bytes(dir.path() / "counts", "\xef\xbb\xbf {\"logical_count\": [[1, 2]]}");
  EXPECT_EQ(io::read_counts(dir.path() / "counts").counts, (std::vector<std::int64_t>{1, 2}));
  write_bytes(dir.path() / "bad.json", "\x1b[2J\xff");
  expect_error([&] { io::read_counts(dir.path() / "bad.json"); }, {"not valid JSON"});
  write_bytes(dir.path() / "random.bin", "\x1b[2J\xff\xfe garbage"s);
  expect_error([&] { io::read_counts(dir.path() / "random.bin"); },
               {"random.bin: not a file moestat reads", "\\x1b[2J\\xff\\xfe garbage"});
  write_bytes(dir.path() / "empty", "");
  expect_error([&] { io::detect_file_format(dir.path() / "empty"); }, {"empty: the file is empty"});
}

// ---- item 10: no raw byte of a file reaches a message ----

TEST(FileBytesInMessages, AreEscaped) {
  ScratchDir dir;
  write_bytes(dir.path() / "bad.json", "{\"logical_count\": \xff\x1b]0;pwned\x07}");
  try {
    io::read_counts(dir.path() / "bad.json");
    ADD_FAILURE() << "read a broken file";
  } catch (const Error& error) {
    for (const char c : error.message()) {
      EXPECT_TRUE(c >= 0x20 && c < 0x7f)
          << "byte " << int(static_cast<unsigned char>(c)) << " in: " << error.message();
    }
  }
}

// ---- item 7: sums of counts are checked ----

TEST(CountOverflow, LogicalCountsTotalsRefuseASumBeyondInt64) {
  const CountWindow counts{.window_size = 1,
                           .num_layers = 2,
                           .num_experts = 2,
                           .has_window_axis = false,
                           .counts = {kMax, kMax, 2, 3}};
  expect_error([&] { static_cast<void>(counts.totals()); },
               {"the sum of logical_count overflows int64"});
  // Each total fits, but not their sum: refused too, so every later sum of totals fits.
  const CountWindow split{.window_size = 1,
                          .num_layers = 1,
                          .num_experts = 2,
                          .has_window_axis = false,
                          .counts = {kMax, 1}};
  expect_error([&] { static_cast<void>(split.totals()); }, {"overflows int64"});
  const CountWindow full{.window_size = 2,
                         .num_layers = 1,
                         .num_experts = 2,
                         .has_window_axis = true,
                         .counts = {kMax - 3, 0, 3, 0}};
  EXPECT_EQ(full.totals(), (std::vector<std::int64_t>{kMax, 0}));
}

TEST(CountOverflow, SnapshotTotalsRefuseASumBeyondInt64) {
  Snapshot snapshot;
  snapshot.num_layers = 1;
  snapshot.num_logical_experts = 2;
  snapshot.num_physical_experts = 2;
  snapshot.top_k = 1;
  snapshot.pass_ids = {0, 1};
  snapshot.logical_counts = {kMax, 0, 1, 0};
  snapshot.physical_counts = {0, 0, 0, 0};
  expect_error([&] { static_cast<void>(snapshot.logical_totals()); }, {"overflows int64"});
  snapshot.logical_counts = {kMax - 1, 0, 1, 0};
  EXPECT_EQ(snapshot.logical_totals(), (std::vector<std::int64_t>{kMax, 0}));
}

}  // namespace
}  // namespace moestat::test
