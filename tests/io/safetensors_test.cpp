// safetensors: round trips of random tensors, a file laid out by hand from the format's
// description, and refusal of headers and offsets that do not describe the data.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstring>
#include <moestat/io/safetensors.hpp>
#include <nlohmann/json.hpp>
#include <random>

#include "io/test_support.hpp"

namespace moestat::test {
namespace {

using io::HostTensor;
using io::NamedTensors;
using namespace std::string_literals;

std::span<const std::byte> bytes_of(const std::string& text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

/// A file from a header object and raw data, laid out as the format describes.
std::string file_of(const nlohmann::json& header, const std::string& data) {
  const std::string text = header.dump();
  std::string out(8, '\0');
  const std::uint64_t size = text.size();
  std::memcpy(out.data(), &size, 8);
  return out + text + data;
}

std::string le32(std::int32_t value) {
  std::string out(4, '\0');
  std::memcpy(out.data(), &value, 4);
  return out;
}

TEST(Safetensors, ReadsAFileLaidOutByHand) {
  const nlohmann::json header = {
      {"__metadata__", {{"format", "pt"}}},
      {"b", {{"dtype", "BOOL"}, {"shape", {2}}, {"data_offsets", {8, 10}}}},
      {"a", {{"dtype", "I32"}, {"shape", {2, 1}}, {"data_offsets", {0, 8}}}}};
  const NamedTensors file =
      io::read_safetensors(bytes_of(file_of(header, le32(7) + le32(-3) + "\x01\x00"s)));
  EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(file.tensors.size(), 2u);
  // In the order of the data, whatever the order of the header.
  EXPECT_EQ(file.tensors[0].first, "a");
  EXPECT_EQ(file.tensors[0].second,
            HostTensor::of<std::int32_t>({2, 1}, std::vector<std::int32_t>{7, -3}));
  EXPECT_EQ(*file.find("b"), HostTensor::of<std::uint8_t>({2}, std::vector<std::uint8_t>{1, 0}));
  EXPECT_EQ(file.find("c"), nullptr);
}

RC_GTEST_PROP(SafetensorsProperty, RandomFilesRoundTripExactly, ()) {
  std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
  auto pick = [&](int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng); };
  NamedTensors file;
  for (int i = pick(0, 3); i > 0; --i) file.metadata[fmt::format("m{}", i)] = "value";
  for (int i = pick(0, 5); i > 0; --i) {
    HostTensor tensor;
    tensor.dtype = static_cast<DType>(pick(0, 4));
    tensor.shape.resize(std::size_t(pick(0, 3)));
    for (auto& size : tensor.shape) size = pick(0, 5);
    tensor.data.resize(std::size_t(tensor.numel()) * dtype_size(tensor.dtype));
    for (auto& b : tensor.data) b = std::byte(pick(0, 255));
    file.tensors.emplace_back(fmt::format("t{}", i), std::move(tensor));
  }
  const std::string bytes = io::safetensors_to_bytes(file);
  // The header is padded so the data starts 8-byte aligned.
  std::uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  RC_ASSERT(header % 8 == 0);
  RC_ASSERT(io::read_safetensors(bytes_of(bytes)) == file);
  // Any cut of the file is refused cleanly, never read as something else.
  const auto cut = *rc::gen::inRange<std::size_t>(0, bytes.size());
  try {
    const NamedTensors partial = io::read_safetensors(bytes_of(bytes.substr(0, cut)));
    RC_ASSERT(partial.tensors.empty() ||
              partial.tensors.back().second.data.empty());  // only empty tensors fit
  } catch (const Error&) {
  }
}

TEST(Safetensors, WritesAtomically) {
  ScratchDir dir;
  NamedTensors file;
  file.tensors.emplace_back("x", HostTensor::of<double>({1}, std::vector<double>{2.5}));
  io::write_safetensors_file(dir.path() / "x.safetensors", file);
  EXPECT_EQ(io::read_safetensors_file(dir.path() / "x.safetensors"), file);
  expect_error([&] { io::write_safetensors_file(dir.path() / "no" / "x.safetensors", file); },
               {"cannot write"});
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"x.safetensors"});
}

TEST(Safetensors, WriterRefusesBadNames) {
  NamedTensors file;
  const HostTensor one = HostTensor::of<std::int64_t>({1}, std::vector<std::int64_t>{1});
  file.tensors = {{"x", one}, {"x", one}};
  expect_error([&] { io::safetensors_to_bytes(file); }, {"two tensors are named \"x\""});
  file.tensors = {{"__metadata__", one}};
  expect_error([&] { io::safetensors_to_bytes(file); }, {"not allowed"});
}

TEST(Safetensors, RefusesHeadersThatDoNotDescribeTheData) {
  auto entry = [](const char* dtype, std::vector<std::int64_t> shape, std::uint64_t begin,
                  std::uint64_t end) {
    return nlohmann::json{{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
  };
  const std::string eight = le32(1) + le32(2);
  const std::vector<std::pair<nlohmann::json, std::string>> bad = {
      {{{"a", entry("F16", {2}, 0, 4)}}, le32(0)},  // unsupported dtype
      {{{"a", entry("I32", {3}, 0, 8)}}, eight},    // size mismatch
      {{{"a", entry("I32", {1}, 0, 4)}, {"b", entry("I32", {1}, 0, 4)}}, eight},  // overlap
      {{{"a", entry("I32", {1}, 4, 8)}}, eight},                                  // hole
      {{{"a", entry("I32", {1}, 0, 4)}}, eight},                                  // trailing data
      {{{"a", entry("I32", {4}, 0, 16)}}, eight},                                 // past the end
      {{{"a", entry("I32", {-1}, 0, 4)}}, le32(0)},                               // negative size
      {{{"a", entry("I64", {1LL << 40, 1LL << 40}, 0, 8)}}, eight},               // overflow
      {{{"a", 5}}, ""},                                                           // not an object
      {{{"__metadata__", {{"k", 1}}}}, ""},  // metadata not str
  };
  for (const auto& [header, data] : bad) {
    EXPECT_THROW(io::read_safetensors(bytes_of(file_of(header, data))), Error) << header.dump();
  }
  expect_error([] { io::read_safetensors(bytes_of("short")); }, {"<memory>", "shorter than 8"});
  expect_error([] { io::read_safetensors(bytes_of("\xff\xff\xff\xff\xff\xff\xff\x7f{}"s)); },
               {"header of"});
  expect_error([] { io::read_safetensors(bytes_of("\x02\0\0\0\0\0\0\0[]"s)); }, {"start with"});
  expect_error([] { io::read_safetensors(bytes_of("\x02\0\0\0\0\0\0\0{x"s)); }, {"JSON"});
}

}  // namespace
}  // namespace moestat::test
