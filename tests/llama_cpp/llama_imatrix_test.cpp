// moestat reads the counts llama.cpp's own llama-imatrix writes (issue 41, item 3). The model
// (imatrix_probe_gguf.py) routes every token of layer l to experts known from its weights
// alone, computed in the script: the counts moestat reads must be exactly chunks x context
// tokens on those experts, zero elsewhere. The second model is tiny_moe_gguf.py's qwen2moe
// (random routing, a shared expert, whose tensors are not experts): every layer's counts sum
// to tokens x top-k. Both through io::read_counts and `moestat convert`.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <moestat/io/gguf.hpp>
#include <moestat/io/statistics.hpp>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>

#include "cli/cli_run.hpp"
#include "io/test_support.hpp"

namespace moestat::test {
namespace {

namespace fs = std::filesystem;

constexpr int kContext = 64;
constexpr int kChunks = 3;
constexpr std::int64_t kTokens = kContext * kChunks;  // every token requests output: all layers

void run(const std::string& command) { ASSERT_EQ(std::system(command.c_str()), 0) << command; }

/// Runs llama-imatrix over a text of enough tokens (one byte token each) and returns its file.
fs::path imatrix_of(const fs::path& model, const fs::path& dir) {
  const fs::path text = dir / "text.txt";
  std::ofstream(text) << std::string(kTokens * 2, 'a')
                             .replace(0, 44,
                                      "The quick brown fox jumps "
                                      "over the lazy dog. ");
  const fs::path out = dir / "imatrix.gguf";
  run(fmt::format(
      "LD_LIBRARY_PATH='{}' '{}' -m '{}' -f '{}' -o '{}' -c {} -b {} --chunks {} "
      "--no-ppl -t 2 >'{}' 2>&1",
      fs::path(MOESTAT_LLAMA_IMATRIX).parent_path().string(), MOESTAT_LLAMA_IMATRIX, model.string(),
      text.string(), out.string(), kContext, kContext, kChunks, (dir / "imatrix.log").string()));
  return out;
}

std::string python(const std::string& script) {
  return fmt::format("PYTHONPATH='{}:{}' '{}' '{}'", MOESTAT_LLAMA_GGUF_PY,
                     fs::path(MOESTAT_TINY_MOE_GGUF).parent_path().string(), MOESTAT_PYTHON,
                     script);
}

/// The counts as `moestat convert` writes them to JSON, read back.
CountWindow converted(const fs::path& imatrix, const fs::path& dir) {
  const CliRun cli =
      run_cli(fmt::format("convert {} {}", quoted(imatrix), quoted(dir / "counts.json")));
  EXPECT_EQ(cli.code, 0) << cli.err;
  return io::read_counts(dir / "counts.json");
}

class LlamaImatrix : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(MOESTAT_LLAMA_IMATRIX)) {
      GTEST_SKIP() << "llama-imatrix is not built in " << MOESTAT_LLAMA_IMATRIX
                   << " (scripts/setup_llama_cpp.sh builds it)";
    }
  }
  ScratchDir dir_;
};

TEST_F(LlamaImatrix, CountsAreTheRoutingTheWeightsGive) {
  const fs::path model = dir_.path() / "probe.gguf", expected = dir_.path() / "expected.json";
  run(python(MOESTAT_IMATRIX_PROBE_GGUF) + fmt::format(" '{}' '{}' --layers 4 --experts 8 "
                                                       "--top-k 2",
                                                       model.string(), expected.string()));
  const fs::path imatrix = imatrix_of(model, dir_.path());
  const auto experts = nlohmann::json::parse(read_whole_file(expected))["experts"];
  const CountWindow counts = io::read_counts(imatrix);
  ASSERT_EQ(counts.num_layers, 4);
  ASSERT_EQ(counts.num_experts, 8);
  std::vector<std::int64_t> want(4 * 8, 0);
  for (std::size_t layer = 0; layer < experts.size(); ++layer) {
    for (const int e : experts[layer]) want[layer * 8 + std::size_t(e)] = kTokens;
  }
  EXPECT_EQ(counts.counts, want);
  EXPECT_EQ(converted(imatrix, dir_.path()).counts, want);
  // inspect says what the file is: llama-imatrix's counts, not an SGLang dump.
  const CliRun inspect = run_cli("inspect " + quoted(imatrix));
  EXPECT_EQ(inspect.code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("kind:        llama-imatrix counts (per-expert .counts), "
                             "[layers][experts]"),
            std::string::npos)
      << inspect.out;
  EXPECT_EQ(inspect.out.find("SGLang"), std::string::npos) << inspect.out;
}

TEST_F(LlamaImatrix, EveryLayerOfASharedExpertModelCountsTokensTimesTopK) {
  const fs::path model = dir_.path() / "qwen2moe.gguf";
  run(python(MOESTAT_TINY_MOE_GGUF) +
      fmt::format(" qwen2moe '{}' --layers 3 --experts 8 --top-k 2", model.string()));
  const CountWindow counts = io::read_counts(imatrix_of(model, dir_.path()));
  ASSERT_EQ(counts.num_layers, 3);
  ASSERT_EQ(counts.num_experts, 8);
  for (std::int64_t layer = 0; layer < 3; ++layer) {
    const auto row = counts.counts.begin() + layer * 8;
    EXPECT_EQ(std::accumulate(row, row + 8, std::int64_t(0)), kTokens * 2) << layer;
    // Random routers spread the tokens: more than the top-k experts are used.
    EXPECT_GT(std::count_if(row, row + 8, [](std::int64_t c) { return c > 0; }), 2) << layer;
  }
}

TEST(GgmlTypeSizes, AreThoseOfLlamaCppsOwnGgufPackage) {
  // gguf-py's GGML_QUANT_SIZES: {type: (elements per block, bytes per block)}.
  ScratchDir dir;
  const fs::path sizes = dir.path() / "sizes.txt";
  const std::string command = fmt::format(
      "PYTHONPATH='{}' '{}' -c 'import gguf\nfor t, (b, s) in gguf.GGML_QUANT_SIZES.items(): "
      "print(int(t), b, s)' > '{}'",
      MOESTAT_LLAMA_GGUF_PY, MOESTAT_PYTHON, sizes.string());
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream in(sizes);
  std::uint32_t type = 0;
  std::int64_t block = 0;
  std::uint64_t bytes = 0;
  int types = 0;
  while (in >> type >> block >> bytes) {
    ++types;
    EXPECT_EQ(io::ggml_tensor_bytes({"t", {block * 2, 3}, type, 0}), bytes * 2 * 3) << type;
  }
  EXPECT_GE(types, 35);
}

}  // namespace
}  // namespace moestat::test
