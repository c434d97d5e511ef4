// Readers against files built to cost memory out of proportion or to read differently here
// and in the reference readers (issue 29, item 4): each is refused with a moestat::Error that
// says why, before the memory is taken.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <moestat/io/files.hpp>
#include <moestat/io/pt.hpp>
#include <moestat/io/safetensors.hpp>
#include <moestat/io/statistics.hpp>
#include <string>

#include "io/test_support.hpp"
#include "io/zip_archive.hpp"

namespace moestat::test {
namespace {

using namespace std::string_literals;  // pickles and headers hold NUL bytes

std::span<const std::byte> bytes_of(const std::string& text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

std::string archive(const std::vector<std::pair<std::string, std::string>>& records) {
  std::vector<io::detail::ZipRecord> zip;
  for (const auto& [name, data] : records) zip.push_back({name, bytes_of(data)});
  return io::detail::zip_archive(zip);
}

/// A safetensors file of `header` (padded to 8 bytes with spaces) and `data`.
std::string safetensors_of(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  const std::uint64_t size = header.size();
  std::memcpy(bytes.data(), &size, 8);
  return bytes + header + data;
}

const std::string kCounts = R"({"logical_count": [[1, 2], [3, 4]]})";

/// io::read_counts of a .json file holding `text`.
CountWindow read_counts_text(const std::string& text) {
  ScratchDir dir;
  const std::filesystem::path path = dir.path() / "counts.json";
  std::ofstream(path, std::ios::binary) << text;
  return io::read_counts(path);
}

// ---- JSON: nesting, memory, duplicate keys, NUL ----

TEST(HostileJson, DeepNestingIsRefusedBeforeItIsBuilt) {
  // 10 MB of '[' built a 772 MB document.
  const std::string brackets(10'000'000, '[');
  expect_error([&] { read_counts_text(brackets); }, {"nested more than 64 deep"});
  // 64 deep, the object included, is JSON (it is not counts)
  const std::string deep = std::string(63, '[') + std::string(63, ']');
  expect_error([&] { read_counts_text("{\"logical_count\": " + deep + "}"); }, {"logical_count"});
}

TEST(HostileJson, ADocumentOfMoreThanSixteenTimesItsTextIsRefused) {
  // 2 MB of "{}," costs 80 bytes of document per 3 bytes of text.
  std::string objects = "[";
  for (int i = 0; i < 700'000; ++i) objects += "{},";
  objects += "{}]";
  expect_error([&] { read_counts_text(objects); },
               {"the JSON document would take more than", "16 times its size plus 1 MiB"});
  // Counts of small numbers (the densest real documents) stay within the bound.
  std::string row = "[";
  for (int i = 0; i < 250'000; ++i) row += "0,";
  row += "1]";
  EXPECT_NO_THROW(read_counts_text("{\"logical_count\": [" + row + "]}"));
}

TEST(HostileJson, AKeyTwiceInOneObjectIsRefused) {
  expect_error([&] { read_counts_text(R"({"logical_count": [[1]], "logical_count": [[2]]})"); },
               {"the key \"logical_count\" appears twice in one object"});
  // One key in two objects is no duplicate.
  EXPECT_NO_THROW(read_counts_text(R"({"logical_count": [[1]], "x": {"logical_count": 1}})"));
}

TEST(HostileJson, ANulByteIsRefused) {
  EXPECT_NO_THROW(read_counts_text(kCounts));
  for (const std::string& text : {kCounts + "\0"s, kCounts + "\0garbage"s}) {
    expect_error([&] { read_counts_text(text); }, {"NUL byte at offset"});
  }
}

// ---- safetensors headers ----

TEST(HostileSafetensors, ADuplicateDtypeInAnEntryIsRefused) {
  const std::string one = R"({"t": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})";
  EXPECT_NO_THROW(io::read_safetensors(bytes_of(safetensors_of(one, "\1\0\0\0"s))));
  const std::string twice =
      R"({"t": {"dtype": "I64", "dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})";
  expect_error([&] { io::read_safetensors(bytes_of(safetensors_of(twice, "\1\0\0\0"s))); },
               {"the key \"dtype\" appears twice"});
}

TEST(HostileSafetensors, ANulAfterTheHeaderIsRefused) {
  const std::string header = R"({"t": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})";
  std::string bytes(8, '\0');
  const std::string padded = header + "\0\0\0"s;  // NUL padding, where the format pads spaces
  const std::uint64_t size = padded.size();
  std::memcpy(bytes.data(), &size, 8);
  expect_error([&] { io::read_safetensors(bytes_of(bytes + padded + "\1\0\0\0"s)); }, {"NUL byte"});
}

TEST(HostileSafetensors, AHeaderOfBracketsIsRefusedBeforeItIsBuilt) {
  // a 60 MB header of '[' reached 4 GiB
  const std::string header = "{\"t\": " + std::string(6'000'000, '[');
  expect_error([&] { io::read_safetensors(bytes_of(safetensors_of(header, ""))); },
               {"nested more than 64 deep"});
}

// ---- .pt: what torch.load reads differently ----

// {"a": tensor(IntStorage key "0", 4 elements), "b": tensor(LongStorage key `key_b`, 2)}
std::string two_tensor_pickle(const std::string& key_b, const std::string& type_b, int numel_b) {
  const auto tensor = [](const std::string& type, const std::string& key, int numel) {
    return "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\n"s + type +
           "\nX\x01\x00\x00\x00"s + key + "X\x03\x00\x00\x00"s + "cpuK"s + char(numel) +
           "tQK\x00K"s + char(numel) + "\x85K\x01\x85\x89"s + "ccollections\nOrderedDict\n)RtR"s;
  };
  return "\x80\x02}(X\x01\x00\x00\x00"s + "a" + tensor("IntStorage", "0", 4) +
         "X\x01\x00\x00\x00"s + "b" + tensor(type_b, key_b, numel_b) + "u."s;
}

TEST(HostilePt, OneStorageDeclaredWithTwoTypesIsRefused) {
  const std::string storage0(16, '\1'), storage1(16, '\2');
  // Two storages: read.
  const std::string distinct = archive({{"x/data.pkl", two_tensor_pickle("1", "LongStorage", 2)},
                                        {"x/data/0", storage0},
                                        {"x/data/1", storage1}});
  const io::PtValue value = io::read_pt(bytes_of(distinct));
  EXPECT_EQ(value.at("b").tensor().shape, (std::vector<std::int64_t>{2}));
  // One key as IntStorage(4) and LongStorage(2): which the counts are depends on the reader.
  const std::string twice =
      archive({{"x/data.pkl", two_tensor_pickle("0", "LongStorage", 2)}, {"x/data/0", storage0}});
  expect_error([&] { io::read_pt(bytes_of(twice), "twice.pt"); },
               {"twice.pt: ", "storage 0 is declared twice", "int32", "int64"});
  // The same declaration twice is one storage shared, as torch.save writes views.
  const std::string shared =
      archive({{"x/data.pkl", two_tensor_pickle("0", "IntStorage", 4)}, {"x/data/0", storage0}});
  EXPECT_NO_THROW(io::read_pt(bytes_of(shared)));
}

TEST(HostilePt, RecordsUnderTwoTopLevelFoldersAreRefused) {
  const std::string pickle = "\x80\x02}X\x01\x00\x00\x00nK\x01s."s;
  EXPECT_NO_THROW(io::read_pt(bytes_of(archive({{"x/data.pkl", pickle}, {"x/version", "3\n"}}))));
  expect_error(
      [&] {
        io::read_pt(bytes_of(archive({{"x/data.pkl", pickle}, {"y/version", "3\n"}})), "two.pt");
      },
      {"two.pt: ", "the record y/version is outside the archive's folder x/"});
}

TEST(HostilePt, AStringThatIsNotUtf8IsRefused) {
  // a dict key of the byte 0xff; Python's pickle refuses it, and so torch.load
  const std::string bad = "\x80\x02}X\x01\x00\x00\x00\xffK\x01s."s;
  expect_error(
      [&] {
        io::read_pt(bytes_of(archive({{"x/data.pkl", bad}})), "key.pt");
      },
      {"key.pt: ", "not UTF-8", "\\xff"});
  // an encoded surrogate, which Python's pickle accepts ("surrogatepass")
  const std::string surrogate = "\x80\x02}X\x03\x00\x00\x00\xed\xa0\x80K\x01s."s;
  EXPECT_NO_THROW(io::read_pt(bytes_of(archive({{"x/data.pkl", surrogate}}))));
}

// ---- item 5: messages of one line ----

TEST(HostileMessages, AnUnrelatedSafetensorsFileIsNamedByAFewOfItsTensors) {
  // 200,000 tensor names made a 1.7 MB error; 2000 show the same
  io::NamedTensors file;
  for (int i = 0; i < 2000; ++i) {
    io::HostTensor tensor;
    tensor.dtype = DType::kInt32;
    tensor.shape = {1};
    tensor.data.resize(4);
    file.tensors.emplace_back("model.layer." + std::to_string(i) + ".weight", std::move(tensor));
  }
  ScratchDir dir;
  io::write_safetensors_file(dir.path() / "weights.safetensors", file);
  try {
    (void)io::read_counts(dir.path() / "weights.safetensors");
    FAIL() << "read";
  } catch (const Error& error) {
    const std::string message = error.message();
    EXPECT_LT(message.size(), 400u) << message;
    EXPECT_NE(message.find("its tensors: model.layer.0.weight"), std::string::npos) << message;
    EXPECT_NE(message.find("(2000 in all)"), std::string::npos) << message;
  }
}

// ---- files that report size 0 ----

TEST(HostileFiles, AProcfsFileThatNeverEndsIsReadOnlyUpToABound) {
  const std::filesystem::path endless = "/proc/self/pagemap";  // size 0, gigabytes of entries
  if (!std::filesystem::exists(endless)) GTEST_SKIP() << "no " << endless;
  expect_error([&] { (void)io::read_text_file(endless); }, {"reports size 0", "16 MiB"});
  // a small one is read whole
  EXPECT_NE(io::read_text_file("/proc/self/status").find("Name:"), std::string::npos);
}

}  // namespace
}  // namespace moestat::test
