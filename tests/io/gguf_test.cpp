// GGUF: llama-imatrix's per-expert counts read as moestat counts, through the format registry,
// from files laid out by hand (gguf_writer.hpp); a model header's tensor sizes; and refusal of
// headers that do not describe their bytes. tests/engines/test_llama_imatrix.py reads files
// written by llama.cpp's own llama-imatrix.
#include <gtest/gtest.h>

#include <moestat/io/files.hpp>
#include <moestat/io/formats.hpp>
#include <moestat/io/gguf.hpp>
#include <moestat/io/statistics.hpp>

#include "io/gguf_writer.hpp"
#include "io/test_support.hpp"

namespace moestat::test {
namespace {

namespace g = gguf;

std::span<const std::byte> bytes_of(const std::string& text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

CountWindow counts_of(const std::string& file) { return io::imatrix_counts(bytes_of(file), "m"); }

TEST(Gguf, ReadsImatrixCountsAsCountsWithDenseLayersZero) {
  // Blocks 0 and 2 dense (attention only), 1 and 3 MoE with 4 experts.
  const std::string file = g::imatrix({{1, {5, 0, 7, 12}}, {3, {1, 2, 3, 18}}});
  ScratchDir dir;
  io::write_file_atomically(dir.path() / "imatrix.gguf", file);
  io::write_file_atomically(dir.path() / "misnamed.json", file);
  for (const char* name : {"imatrix.gguf", "misnamed.json"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(io::detect_file_format(dir.path() / name), io::FileFormat::kGguf);
    const CountWindow counts = io::read_counts(dir.path() / name);
    EXPECT_EQ(counts.num_layers, 4);
    EXPECT_EQ(counts.num_experts, 4);
    EXPECT_EQ(counts.window_size, 1);
    EXPECT_FALSE(counts.has_window_axis);
    EXPECT_EQ(counts.counts,
              (std::vector<std::int64_t>{0, 0, 0, 0, 5, 0, 7, 12, 0, 0, 0, 0, 1, 2, 3, 18}));
    EXPECT_EQ(std::get<CountWindow>(io::read_statistics_file(dir.path() / name)), counts);
  }
  EXPECT_EQ(io::file_format_name(io::FileFormat::kGguf), "gguf");
}

TEST(Gguf, TakesTheLayerCountFromTheModelWhenTheFileSaysIt) {
  const CountWindow counts =
      counts_of(g::imatrix({{1, {1, 1}}}, {{"general.architecture", g::str("qwen3moe")},
                                           {"qwen3moe.block_count", g::u32(6)}}));
  EXPECT_EQ(counts.num_layers, 6);
  expect_error(
      [] {
        counts_of(g::imatrix(
            {{4, {1, 1}}}, {{"general.architecture", g::str("x")}, {"x.block_count", g::u32(4)}}));
      },
      {"x.block_count is 4", "block 4"});
}

TEST(Gguf, RefusesCountsOfOneLayerThatDisagreeOrLayersOfOtherExpertCounts) {
  std::string file = g::imatrix({{0, {1, 2}}});
  // The down tensor's counts (the last F32 pair written) changed from {1, 2} to {1, 3}.
  const std::string two = g::raw(2.0f), three = g::raw(3.0f);
  file.replace(file.rfind(two), 4, three);
  expect_error([&] { counts_of(file); },
               {"blk.0.ffn_gate_exps.weight.counts", "blk.0.ffn_down_exps.weight.counts",
                "different routings"});
  expect_error(
      [] {
        counts_of(g::imatrix({{0, {1, 2}}, {1, {1, 2, 3}}}));
      },
      {"blk.1.ffn_gate_exps.weight.counts", "counts 3 experts", "block 0 counts 2"});
}

TEST(Gguf, RefusesCountsThatAreNotWholeNonNegativeF32OfShapeOneByE) {
  for (const float bad : {-1.0f, 2.5f, std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity(), 1e30f}) {
    SCOPED_TRACE(bad);
    expect_error(
        [&] {
          counts_of(g::imatrix({{0, {1, bad}}}));
        },
        {"blk.0.ffn_gate_exps.weight.counts\"[1]", "a whole number"});
  }
  const auto one = [](g::Tensor tensor) { return g::file({}, {std::move(tensor)}); };
  expect_error(
      [&] {
        counts_of(one({"blk.0.ffn_up_exps.weight.counts", {1, 2}, 1, "abcd"}));
      },
      {"ggml type 1", "F32"});
  expect_error(
      [&] {
        counts_of(one({"blk.0.ffn_up_exps.weight.counts", {2}, 0, g::f32_data({1, 2})}));
      },
      {"shape [2]", "[1, n_expert]"});
  expect_error(
      [&] {
        counts_of(one({"blk.0.ffn_up_exps.weight.counts", {1, 100}, 0, g::f32_data({1})}));
      },
      {"400 bytes", "go beyond"});
  expect_error(
      [&] {
        counts_of(one({"blk.70000.ffn_up_exps.weight.counts", {1, 1}, 0, g::f32_data({1})}));
      },
      {"block 70000"});
}

TEST(Gguf, SaysWhenAFileHoldsNoExpertCounts) {
  expect_error([] { counts_of(g::imatrix({})); },
               {"no per-expert counts", "not an imatrix of a MoE model"});
  const std::string model =
      g::file({{"general.architecture", g::str("qwen3moe")}},
              {{"blk.0.ffn_up_exps.weight", {4, 2, 2}, 0, g::f32_data(std::vector<float>(16))}});
  expect_error([&] { counts_of(model); }, {"no per-expert counts", "nor an imatrix at all"});
  ScratchDir dir;
  io::write_file_atomically(dir.path() / "i.gguf", g::imatrix({{0, {1, 2}}}));
  expect_error([&] { io::read_placement(dir.path() / "i.gguf"); },
               {"i.gguf", "GGUF", "no placement"});
  expect_error([&] { io::read_expert_mask(dir.path() / "i.gguf"); }, {"no expert_mask"});
  expect_error(
      [&] {
        io::write_counts(dir.path() / "out.gguf", counts_of(g::imatrix({{0, {1}}})));
      },
      {"unknown extension \".gguf\""});
}

TEST(Gguf, RefusesEveryTruncationOfAValidFile) {
  const std::string file = g::imatrix({{0, {1, 2}}, {1, {3, 4}}});
  for (std::size_t size = 0; size < file.size(); ++size) {
    // The padding after the last tensor's data is not read: those prefixes still read.
    try {
      const CountWindow counts = counts_of(file.substr(0, size));
      EXPECT_EQ(counts.counts, (std::vector<std::int64_t>{1, 2, 3, 4})) << size;
    } catch (const Error& error) {
      EXPECT_FALSE(error.message().empty());
    }
  }
  EXPECT_THROW(counts_of(file.substr(0, 100)), Error);
}

TEST(Gguf, RefusesHeadersThatDoNotDescribeTheirBytes) {
  const auto header = [](std::uint32_t version, std::uint64_t tensors, std::uint64_t keys) {
    return "GGUF" + g::raw(version) + g::raw(tensors) + g::raw(keys);
  };
  const auto refused = [&](const std::string& bytes, std::initializer_list<std::string_view> says) {
    expect_error([&] { io::read_gguf_header(bytes_of(bytes), "h"); }, says);
  };
  refused("GGML" + g::raw(std::uint32_t(3)), {"not a GGUF file"});
  refused(header(1, 0, 0), {"GGUF version 1"});
  refused(header(0x03000000, 0, 0), {"big-endian"});
  refused(header(3, 0, std::uint64_t(1) << 60), {"metadata entries declared"});
  refused(header(3, std::uint64_t(1) << 60, 0), {"tensors declared"});
  refused(header(3, 0, 1) + g::raw(std::uint64_t(1) << 62) + std::string(16, '\0'),
          {"ends inside metadata key 0"});
  refused(header(3, 0, 1) + g::str_bytes("k") + g::raw(std::uint32_t(9)) +
              g::raw(std::uint32_t(9)) + g::raw(std::uint64_t(1)),
          {"array of arrays"});
  refused(header(3, 0, 1) + g::str_bytes("k") + g::raw(std::uint32_t(9)) +
              g::raw(std::uint32_t(8)) + g::raw(std::uint64_t(1) << 40),
          {"declares 1099511627776 strings"});
  refused(header(3, 0, 1) + g::str_bytes("k") + g::raw(std::uint32_t(13)), {"value type 13"});
  refused(header(3, 0, 1) + g::str_bytes("k") + g::raw(std::uint32_t(7)) + g::raw(std::uint8_t(2)),
          {"bool of value 2"});
  refused(g::file({{"a", g::u32(1)}, {"a", g::u32(2)}}, {}), {"\"a\" appears twice"});
  refused(g::file({{"general.alignment", g::u32(24)}}, {}), {"general.alignment"});
  refused(g::file({}, {{"t", {1, 1, 1, 1, 1}, 0, ""}}), {"5 dimensions"});
  refused(g::file({}, {{"t", {std::uint64_t(1) << 62, 8}, 0, ""}}), {"overflows int64"});
  std::string misaligned = g::file({}, {{"t", {1}, 0, g::f32_data({1})}});
  misaligned.replace(misaligned.find("t") + 1 + 4 + 8 + 4, 8, g::raw(std::uint64_t(3)));
  refused(misaligned, {"data offset 3", "alignment 32"});
}

TEST(Gguf, ReadsAModelHeaderAndTheBytesOfItsTensors) {
  ScratchDir dir;
  const std::string file =
      g::file({{"general.architecture", g::str("qwen3moe")},
               {"qwen3moe.block_count", g::u32(2)},
               {"tokenizer.ggml.tokens", g::strings({"a", "b"})}},
              {{"blk.0.ffn_up_exps.weight", {512, 4, 8}, 12, std::string(8 * 4 * 2 * 144, '\0')},
               {"blk.0.ffn_down_exps.weight", {4, 512, 8}, 0, std::string(8 * 512 * 4 * 4, '\0')}});
  io::write_file_atomically(dir.path() / "model.gguf", file);
  const io::GgufHeader header = io::read_gguf_header_file(dir.path() / "model.gguf");
  EXPECT_EQ(header.version, 3u);
  ASSERT_NE(header.find("qwen3moe.block_count"), nullptr);
  EXPECT_EQ(header.find("qwen3moe.block_count")->integer, 2);
  EXPECT_EQ(header.find("tokenizer.ggml.tokens")->text, "[2 x str]");
  ASSERT_EQ(header.tensors.size(), 2u);
  EXPECT_EQ(header.tensors[0].shape, (std::vector<std::int64_t>{512, 4, 8}));
  // Q4_K: 256 elements in 144 bytes.
  EXPECT_EQ(io::ggml_tensor_bytes(header.tensors[0]), 8u * 4 * 2 * 144);
  EXPECT_EQ(io::ggml_tensor_bytes(header.tensors[1]), 8u * 512 * 4 * 4);
  EXPECT_EQ(io::ggml_tensor_bytes({"t", {100, 2}, 12, 0}), std::nullopt);  // not whole blocks
  EXPECT_EQ(io::ggml_tensor_bytes({"t", {32}, 99, 0}), std::nullopt);      // unknown type
  expect_error([&] { io::read_gguf_header_file(dir.path()); }, {"not a regular file"});

  // A header (one 80 MiB key) that goes past the 64 MiB read of a model: a sparse file.
  const std::filesystem::path big = dir.path() / "big.gguf";
  io::write_file_atomically(big, "GGUF" + g::raw(std::uint32_t(3)) + g::raw(std::uint64_t(0)) +
                                     g::raw(std::uint64_t(1)) + g::raw(std::uint64_t(80) << 20));
  std::filesystem::resize_file(big, std::uint64_t(96) << 20);
  expect_error([&] { io::read_gguf_header_file(big); },
               {"big.gguf", "GGUF header goes beyond the first 67108864 bytes"});
}

}  // namespace
}  // namespace moestat::test
