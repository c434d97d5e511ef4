// torch .pt files: fixtures written by a real torch.save, round trips of random values, and
// refusal (never a crash) of files outside the subset, damaged or hostile.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <zip.h>

#include <bit>
#include <fstream>
#include <moestat/io/pt.hpp>
#include <random>
#include <set>
#include <utility>

#include "io/test_support.hpp"
#include "io/zip_archive.hpp"

namespace moestat::test {
namespace {

using io::HostTensor;
using io::PtDict;
using io::PtList;
using io::PtTuple;
using io::PtValue;
using namespace std::string_literals;  // pickles hold NUL bytes

const std::filesystem::path kFixtures = MOESTAT_FIXTURE_DIR;

std::span<const std::byte> bytes_of(const std::string& text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

template <typename T>
HostTensor tensor(std::vector<std::int64_t> shape, std::vector<T> values) {
  return HostTensor::of<T>(std::move(shape), std::span<const T>(values));
}

/// A .pt archive around a hand-made pickle and storages "0", "1", ...
std::string archive_with(const std::string& pickle, const std::vector<std::string>& storages = {}) {
  std::vector<io::detail::ZipRecord> records{{"x/data.pkl", bytes_of(pickle)}};
  for (std::size_t i = 0; i < storages.size(); ++i) {
    records.push_back({"x/data/" + std::to_string(i), bytes_of(storages[i])});
  }
  return io::detail::zip_archive(records);
}

// ---- files written by torch.save (tests/io/fixtures/make_pt_fixtures.py) ----

TEST(PtFixtures, SglangStatDumpWithACudaTensor) {
  const PtValue dump = io::read_pt_file(kFixtures / "sglang_stat_dump.pt");
  ASSERT_EQ(dump.dict().size(), 3u);
  EXPECT_EQ(dump.at("rank").as_int(), 0);
  EXPECT_EQ(dump.at("average_utilization_rate_over_window").as_float(), 0.875);
  const HostTensor& counts = dump.at("logical_count").tensor();
  EXPECT_EQ(counts.dtype, DType::kInt32);
  EXPECT_EQ(counts.device, Device::cuda(0));
  EXPECT_EQ(counts.shape, (std::vector<std::int64_t>{2, 3, 4}));
  std::vector<std::int32_t> expected(24);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(counts.values<std::int32_t>(), expected);
}

TEST(PtFixtures, SglangPlacement) {
  const PtValue file = io::read_pt_file(kFixtures / "sglang_placement.pt");
  const HostTensor& map = file.at("physical_to_logical_map").tensor();
  EXPECT_EQ(map.dtype, DType::kInt64);
  EXPECT_EQ(map.device, Device::cpu());
  EXPECT_EQ(map.shape, (std::vector<std::int64_t>{2, 6}));
  EXPECT_EQ(map.values<std::int64_t>(),
            (std::vector<std::int64_t>{0, 1, 2, 3, 0, 1, 3, 2, 1, 0, 3, 3}));
}

TEST(PtFixtures, EveryValueKindAndStridedViews) {
  const PtValue file = io::read_pt_file(kFixtures / "mixed.pt");
  EXPECT_TRUE(file.at("none").is_none());
  EXPECT_EQ(file.at("true").as_bool(), true);
  std::vector<std::int64_t> ints;
  for (const PtValue& value : file.at("ints").list()) ints.push_back(value.as_int());
  EXPECT_EQ(ints,
            (std::vector<std::int64_t>{0, 255, 256, 65535, 65536, -1, -(std::int64_t(1) << 31),
                                       std::int64_t(1) << 31, std::int64_t(1) << 62,
                                       std::numeric_limits<std::int64_t>::min()}));
  EXPECT_EQ(file.at("float").as_float(), -2.5);
  EXPECT_EQ(file.at("text").as_str(), "h\xc3\xa9llo");
  EXPECT_EQ(file.at("tuple"), PtValue(PtTuple{{PtValue(1), PtValue("two"), PtValue(3.0)}}));
  const PtDict& dict = file.dict();
  const auto int_key = std::find_if(dict.begin(), dict.end(), [](const auto& item) {
    return item.first.kind() == PtValue::Kind::kInt && item.first.as_int() == 7;
  });
  ASSERT_NE(int_key, dict.end());
  EXPECT_EQ(int_key->second.as_str(), "int key");
  EXPECT_EQ(file.at("nested"),
            PtValue(PtDict{{PtValue("inner"), PtValue(PtList{PtValue(PtList{}), PtValue(PtDict{}),
                                                             PtValue(PtTuple{})})}}));
  EXPECT_EQ(file.at("int32").tensor(), tensor<std::int32_t>({3}, {1, -2, 3}));
  EXPECT_EQ(file.at("float32").tensor(), tensor<float>({1, 2}, {0.5f, -1.0f}));
  EXPECT_EQ(file.at("float64").tensor(), tensor<double>({}, {3.25}));
  EXPECT_EQ(file.at("bool").tensor(), tensor<std::uint8_t>({3}, {1, 0, 1}));
  EXPECT_EQ(file.at("empty").tensor(), tensor<std::int64_t>({0, 5}, {}));
  // base = arange(12).reshape(3, 4): its transpose and its row 1 share base's storage.
  EXPECT_EQ(file.at("transposed").tensor(),
            tensor<std::int64_t>({4, 3}, {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(file.at("row").tensor(), tensor<std::int64_t>({4}, {4, 5, 6, 7}));
}

// ---- round trips ----

/// A random value of every kind, nested at most `depth` deep.
PtValue random_value(std::mt19937_64& rng, int depth) {
  const int kinds = depth > 0 ? 9 : 6;
  auto pick = [&](std::int64_t low, std::int64_t high) {
    return std::uniform_int_distribution<std::int64_t>(low, high)(rng);
  };
  switch (pick(0, kinds - 1)) {
    case 0:
      return {};
    case 1:
      return PtValue(pick(0, 1) == 1);
    case 2: {
      const std::int64_t magnitude = std::int64_t(1) << pick(0, 62);
      return PtValue(pick(-magnitude, magnitude));
    }
    case 3:
      return PtValue(std::bit_cast<double>(std::uint64_t(rng())));
    case 4: {  // UTF-8 of code points below U+0800 (a str: torch.load refuses other bytes)
      std::string text;
      for (std::int64_t n = pick(0, 20); n > 0; --n) {
        const auto code = std::uint32_t(pick(0, 0x7ff));
        if (code < 0x80) {
          text += char(code);
        } else {
          text += char(0xc0 | (code >> 6));
          text += char(0x80 | (code & 0x3f));
        }
      }
      return PtValue(std::move(text));
    }
    case 5: {
      HostTensor t;
      t.dtype = static_cast<DType>(pick(0, 4));
      t.shape.resize(std::size_t(pick(0, 3)));
      for (auto& size : t.shape) size = pick(0, 4);
      t.data.resize(std::size_t(t.numel()) * dtype_size(t.dtype));
      for (auto& b : t.data) b = std::byte(pick(0, t.dtype == DType::kBool ? 1 : 255));
      t.device = pick(0, 1) == 0 ? Device::cpu() : Device::cuda(int(pick(0, 9)));
      return PtValue(std::move(t));
    }
    case 6: {
      PtList list(std::size_t(pick(0, 4)));
      for (auto& item : list) item = random_value(rng, depth - 1);
      return PtValue(std::move(list));
    }
    case 7: {
      PtTuple tuple{std::vector<PtValue>(std::size_t(pick(0, 4)))};
      for (auto& item : tuple.items) item = random_value(rng, depth - 1);
      return PtValue(std::move(tuple));
    }
    default: {
      PtDict dict;
      // A key twice makes a dict the reader refuses as ambiguous: the keys drawn are distinct.
      std::set<std::pair<bool, std::int64_t>> keys;  // (is a string "k<n>", n)
      for (std::int64_t i = pick(0, 4); i > 0; --i) {
        const bool text = pick(0, 1) == 1;
        const std::int64_t n = text ? pick(0, 99) : pick(-1000, 1000);
        if (!keys.insert({text, n}).second) continue;
        dict.emplace_back(text ? PtValue(fmt::format("k{}", n)) : PtValue(n),
                          random_value(rng, depth - 1));
      }
      return PtValue(std::move(dict));
    }
  }
}

/// Equality that treats NaN floats as equal when their bits are (operator== would not).
bool same(const PtValue& a, const PtValue& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case PtValue::Kind::kFloat:
      return std::bit_cast<std::uint64_t>(a.as_float()) ==
             std::bit_cast<std::uint64_t>(b.as_float());
    case PtValue::Kind::kList:
    case PtValue::Kind::kTuple: {
      const auto& x = a.kind() == PtValue::Kind::kList ? a.list() : a.tuple().items;
      const auto& y = b.kind() == PtValue::Kind::kList ? b.list() : b.tuple().items;
      return std::equal(x.begin(), x.end(), y.begin(), y.end(), same);
    }
    case PtValue::Kind::kDict:
      return std::equal(a.dict().begin(), a.dict().end(), b.dict().begin(), b.dict().end(),
                        [](const auto& x, const auto& y) {
                          return same(x.first, y.first) && same(x.second, y.second);
                        });
    default:
      return a == b;
  }
}

RC_GTEST_PROP(PtProperty, RandomValuesRoundTripExactly, ()) {
  std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
  const PtValue value = random_value(rng, 4);
  const std::string bytes = io::pt_to_bytes(value);
  RC_ASSERT(same(io::read_pt(bytes_of(bytes)), value));
  // Equal values give equal bytes: the archive carries no clock or counter.
  RC_ASSERT(io::pt_to_bytes(value) == bytes);
}

RC_GTEST_PROP(PtProperty, EveryPrefixOfAFileReadsWhollyOrFailsCleanly, ()) {
  std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
  PtDict dict{{PtValue("value"), random_value(rng, 2)}};
  dict.emplace_back(PtValue("tensor"), PtValue(tensor<std::int32_t>({2}, {1, 2})));
  const PtValue value(std::move(dict));
  const std::string bytes = io::pt_to_bytes(value);
  const auto cut = *rc::gen::inRange<std::size_t>(0, bytes.size());
  try {
    RC_ASSERT(same(io::read_pt(bytes_of(bytes.substr(0, cut))), value));
  } catch (const Error&) {
  }
}

TEST(PtFile, WritesAtomicallyAndReadsBack) {
  ScratchDir dir;
  const PtValue value(PtDict{{PtValue("a"), PtValue(tensor<double>({2}, {1.5, -0.0}))}});
  io::write_pt_file(dir.path() / "a.pt", value);
  EXPECT_EQ(io::read_pt_file(dir.path() / "a.pt"), value);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.pt"});
  expect_error([&] { io::write_pt_file(dir.path() / "missing" / "b.pt", value); },
               {"cannot write", "b.pt"});
}

TEST(PtFile, NarrowIntegerTensorsRoundTripAsTorchsByteAndShortStorages) {
  for (const DType dtype : {DType::kUInt8, DType::kInt16}) {
    HostTensor narrow;
    narrow.dtype = dtype;
    narrow.shape = {2, 2};
    for (int i = 0; i < 4 * int(dtype_size(dtype)); ++i) narrow.data.push_back(std::byte(i * 37));
    const PtValue value(PtDict{{PtValue("ids"), PtValue(narrow)}});
    const std::string bytes = io::pt_to_bytes(value);
    EXPECT_NE(bytes.find(dtype == DType::kUInt8 ? "ByteStorage" : "ShortStorage"),
              std::string::npos);
    EXPECT_EQ(io::read_pt(bytes_of(bytes)), value);
  }
  HostTensor uint16;
  uint16.dtype = DType::kUInt16;
  uint16.shape = {1};
  uint16.data.resize(2);
  expect_error([&] { io::pt_to_bytes(PtValue(uint16)); }, {"cannot hold a uint16 tensor"});
}

TEST(PtFile, WriterRefusesInconsistentTensorsAndKeys) {
  HostTensor bad = tensor<std::int32_t>({2}, {1, 2});
  bad.shape = {3};
  expect_error([&] { io::pt_to_bytes(PtValue(bad)); }, {"holds 8 bytes, not 12"});
  expect_error(
      [] {
        io::pt_to_bytes(PtValue(PtDict{{PtValue(1.5), PtValue()}}));
      },
      {"dict key of type float"});
}

// ---- refusals ----

TEST(PtFile, RefusesWhatIsNotATorchZip) {
  expect_error([] { io::read_pt(bytes_of("\x80\x02}q\x00.")); }, {"<memory>", "no zip signature"});
  expect_error([] { io::read_pt(bytes_of("PK\x03\x04garbage")); }, {"not a zip archive"});
  const std::string no_pickle =
      io::detail::zip_archive(std::vector<io::detail::ZipRecord>{{"x/other", bytes_of("1")}});
  expect_error([&] { io::read_pt(bytes_of(no_pickle)); }, {"without a data.pkl"});
  ScratchDir dir;
  expect_error([&] { io::read_pt_file(dir.path() / "absent.pt"); }, {"absent.pt"});
}

TEST(PtFile, RefusesGlobalsOutsideTheSubset) {
  expect_error(
      [] {
        io::read_pt(
            bytes_of(archive_with("\x80\x02"
                                  "cos\nsystem\n.")));
      },
      {"global os.system is outside the subset"});
  expect_error(
      [] {
        io::read_pt(
            bytes_of(archive_with("\x80\x02"
                                  "ctorch\nHalfStorage\n.")));
      },
      {"torch.HalfStorage"});
  expect_error([] { io::read_pt(bytes_of(archive_with("\x80\x02\x81."))); },
               {"opcode 0x81", "outside the subset"});
  expect_error([] { io::read_pt(bytes_of(archive_with("\x80\x01N."))); }, {"protocol 1"});
}

/// The pickle of one tensor _rebuild_tensor_v2(storage "0" of `numel` ints, offset, size,
/// stride), built by hand.
std::string tensor_pickle(int numel, int offset, const std::string& size, const std::string& stride,
                          const std::string& location = "cpu") {
  std::string out =
      "\x80\x02"
      "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage"
      "ctorch\nIntStorage\nX\x01\x00\x00\x00"
      "0"s;
  out += 'X';
  out += char(location.size());
  out += std::string(3, '\0') + location;
  out += "K" + std::string(1, char(numel)) + "tQK" + std::string(1, char(offset));
  out += "(" + size + "t(" + stride +
         "t\x89"
         "ccollections\nOrderedDict\n)RtR.";
  return out;
}

TEST(PtFile, HandMadeTensorPicklesReadAsTorchWouldView) {
  const std::string storage = std::string("\1\0\0\0\2\0\0\0\3\0\0\0\4\0\0\0", 16);
  // Elements 1..3 with stride 1, then a [2] view of every other element from 0.
  EXPECT_EQ(io::read_pt(bytes_of(archive_with(tensor_pickle(4, 1, "K\x03", "K\x01"), {storage})))
                .tensor(),
            tensor<std::int32_t>({3}, {2, 3, 4}));
  EXPECT_EQ(io::read_pt(bytes_of(archive_with(tensor_pickle(4, 0, "K\x02", "K\x02"), {storage})))
                .tensor(),
            tensor<std::int32_t>({2}, {1, 3}));
  EXPECT_EQ(io::read_pt(
                bytes_of(archive_with(tensor_pickle(4, 0, "K\x02", "K\x01", "cuda:3"), {storage})))
                .tensor()
                .device,
            Device::cuda(3));
}

TEST(PtFile, RefusesTensorsThatDoNotFitTheirStorage) {
  const std::string storage = std::string("\1\0\0\0\2\0\0\0\3\0\0\0\4\0\0\0", 16);
  expect_error(
      [&] {
        io::read_pt(bytes_of(archive_with(tensor_pickle(4, 2, "K\x03", "K\x01"), {storage})));
      },
      {"past the end of its storage"});
  expect_error(
      [&] {
        io::read_pt(bytes_of(archive_with(tensor_pickle(4, 0, "K\x05", "K\x00"s), {storage})));
      },
      {"more elements than its storage"});
  expect_error(
      [&] {
        io::read_pt(bytes_of(archive_with(tensor_pickle(5, 0, "K\x02", "K\x01"), {storage})));
      },
      {"holds 16 bytes, not 20"});
  expect_error([&] { io::read_pt(bytes_of(archive_with(tensor_pickle(4, 0, "K\x02", "K\x01")))); },
               {"no record x/data/0"});
  expect_error(
      [&] {
        io::read_pt(
            bytes_of(archive_with(tensor_pickle(4, 0, "K\x02", "K\x01", "tpu"), {storage})));
      },
      {"location \"tpu\""});
}

TEST(PtFile, RefusesMalformedPickles) {
  for (const std::string& pickle :
       {std::string("\x80\x02"), std::string("\x80\x02."), std::string("\x80\x02(N."),
        std::string("\x80\x02h\x05."), std::string("\x80\x02NNs."),
        std::string("\x80\x02X\xff\xff\xff\xff"),
        std::string("\x80\x02\x8a\x09"
                    "123456789.")}) {
    EXPECT_THROW(io::read_pt(bytes_of(archive_with(pickle))), Error) << pickle;
  }
}

TEST(PtFile, RefusesSelfReferenceDeepNestingAndExponentialSharing) {
  // l = []; l.append(l)
  expect_error(
      [] {
        io::read_pt(
            bytes_of(archive_with("\x80\x02]q\x00h\x00"
                                  "a."s)));
      },
      {"deeper than 64"});
  std::string deep = "\x80\x02";
  for (int i = 0; i < 100; ++i) deep += "]";
  for (int i = 0; i < 99; ++i) deep += "a";
  expect_error([&] { io::read_pt(bytes_of(archive_with(deep + "."))); }, {"deeper than 64"});
  // x0 = "aaaa..."; x(n+1) = [xn, xn]: 2^40 copies of a short string.
  std::string laughs =
      "\x80\x02X\x08\x00\x00\x00"
      "abcdefghq\x00"s;
  for (int i = 0; i < 40; ++i) {
    laughs += "(h" + std::string(1, char(i)) + "h" + std::string(1, char(i)) + "tq" +
              std::string(1, char(i + 1));
  }
  expect_error([&] { io::read_pt(bytes_of(archive_with(laughs + "."))); },
               {"a shared object counts at every reference"});
}

TEST(PtFile, ChargesWhatThePickleBuildsToTheFilesBudget) {
  // Runs of one-byte opcodes that each make an object, a memo entry or a mark (issue 14: a
  // deflated 64 MiB run took 3 GB); here the budget is the file's size plus 1 MiB.
  const io::PtReadLimits file_plus_1_mib{.max_expansion = 1};
  const std::size_t n = std::size_t(1) << 20;
  for (const std::string& pickle :
       {"\x80\x02" + std::string(n, ']') + ".", "\x80\x02]" + std::string(n, '\x94') + ".",
        "\x80\x02" + std::string(n, '(') + "N."}) {
    expect_error([&] { io::read_pt(bytes_of(archive_with(pickle)), "bomb.pt", file_plus_1_mib); },
                 {"bomb.pt: the pickle's objects would take more than", "bytes of memory"});
  }
}

/// A zip of `records` as a compressing tool would write it: records whose name ends with
/// "pad" stored, every other one deflated (io::detail::zip_archive only stores).
std::string deflated_archive(const std::vector<std::pair<std::string, std::string>>& records) {
  zip_error_t error;
  zip_source_t* buffer = zip_source_buffer_create(nullptr, 0, 0, &error);
  zip_source_keep(buffer);
  zip_t* archive = zip_open_from_source(buffer, ZIP_TRUNCATE, &error);
  for (const auto& [name, data] : records) {
    const zip_int64_t index = zip_file_add(
        archive, name.c_str(), zip_source_buffer(archive, data.data(), data.size(), 0), 0);
    zip_set_file_compression(archive, zip_uint64_t(index),
                             name.ends_with("pad") ? ZIP_CM_STORE : ZIP_CM_DEFLATE, 9);
  }
  EXPECT_EQ(zip_close(archive), 0);
  zip_source_open(buffer);
  std::string out;
  char chunk[1 << 16];
  for (zip_int64_t got; (got = zip_source_read(buffer, chunk, sizeof chunk)) > 0;) {
    out.append(chunk, std::size_t(got));
  }
  zip_source_close(buffer);
  zip_source_free(buffer);
  return out;
}

TEST(PtFile, ChargesEveryStorageLoadedToTheFilesBudget) {
  // Four deflated storages of 1 MiB of zeros, each no larger than the file (1 MiB of stored
  // padding), each read for a one-element view (issue 14: 1100 of 8 MiB took 8 GB).
  const io::PtReadLimits file_plus_1_mib{.max_expansion = 1};
  const std::int32_t numel = 1 << 18;
  std::string pickle = "\x80\x02](";
  std::vector<std::pair<std::string, std::string>> records{{"x/pad", std::string(1 << 20, 'x')}};
  for (char key = '0'; key < '4'; ++key) {
    pickle +=
        "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage"
        "ctorch\nIntStorage\nX\x01\x00\x00\x00"s +
        key +
        "X\x03\x00\x00\x00"
        "cpuJ"s +
        std::string(reinterpret_cast<const char*>(&numel), sizeof numel) +
        "tQK\x00(K\x01t(K\x01t\x89}tR"s;
    records.emplace_back("x/data/"s + key, std::string(std::size_t(numel) * 4, '\0'));
  }
  records.emplace_back("x/data.pkl", pickle + "e.");
  const std::string file = deflated_archive(records);
  ASSERT_LT(std::size_t(numel) * 4, file.size());
  EXPECT_EQ(io::read_pt(bytes_of(file)).list().size(), 4u);  // within 16 times the file
  expect_error([&] { io::read_pt(bytes_of(file), "storages.pt", file_plus_1_mib); },
               {"storages.pt: the tensor storages would take more than"});
}

}  // namespace
}  // namespace moestat::test
