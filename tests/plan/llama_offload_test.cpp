// llama.cpp's offload plan against hand tallies: whole layers by routed tokens per byte, the
// --n-cpu-moe split, the per-expert plan of the hot-expert planner sized to the bytes, the -ot
// pattern as llama.cpp's std::regex_search reads it, and `moestat llama-offload` end to end.
#include <gtest/gtest.h>

#include <moestat/io/files.hpp>
#include <moestat/plan/llama_offload.hpp>
#include <nlohmann/json.hpp>
#include <regex>

#include "cli/cli_run.hpp"
#include "io/gguf_writer.hpp"
#include "io/test_support.hpp"

namespace moestat::test {
namespace {

// Layer 0 dense; layers 1 to 3 route 10, 20 and 32 tokens (62 in all) over 4 experts.
plan::ExpertLoads loads() { return {4, 4, {0, 0, 0, 0, 10, 0, 0, 0, 5, 5, 5, 5, 30, 1, 1, 0}}; }
const std::vector<std::uint64_t> kHundred{0, 100, 100, 100};  // a layer's experts: 400 bytes

TEST(LlamaOffload, ChoosesWholeLayersOfMostTokensPerByteAndTheNCpuMoeSplit) {
  const plan::LlamaOffload plan = plan::plan_llama_offload(loads(), kHundred, 500);
  EXPECT_EQ(plan.moe_layers, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(plan.whole_layers.gpu_layers, (std::vector<std::int64_t>{3}));
  EXPECT_EQ(plan.whole_layers.bytes, 400u);
  EXPECT_DOUBLE_EQ(plan.whole_layers.share, 32.0 / 62);
  EXPECT_EQ(plan.n_cpu_moe, 3);
  EXPECT_EQ(plan.last_layers.gpu_layers, (std::vector<std::int64_t>{3}));
  // Per expert, 5 of 100 bytes: 30, 10, then three of layer 2's fives (lowest ids first).
  EXPECT_EQ(plan.expert_bytes_used, 500u);
  EXPECT_DOUBLE_EQ(plan.expert_share, 55.0 / 62);
  EXPECT_EQ(plan.experts.on_gpu,
            (std::vector<std::uint8_t>{1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 1, 0, 0, 0}));

  const plan::LlamaOffload two = plan::plan_llama_offload(loads(), kHundred, 800);
  EXPECT_EQ(two.whole_layers.gpu_layers, (std::vector<std::int64_t>{2, 3}));
  EXPECT_DOUBLE_EQ(two.whole_layers.share, 52.0 / 62);
  EXPECT_EQ(two.n_cpu_moe, 2);
  EXPECT_DOUBLE_EQ(two.expert_share, 1.0);  // the 8 experts with tokens

  const plan::LlamaOffload none = plan::plan_llama_offload(loads(), kHundred, 399);
  EXPECT_TRUE(none.whole_layers.gpu_layers.empty());
  EXPECT_EQ(none.whole_layers.share, 0.0);
  EXPECT_EQ(none.n_cpu_moe, 4);
  EXPECT_DOUBLE_EQ(none.expert_share, 45.0 / 62);  // 30 + 10 + 5
}

TEST(LlamaOffload, WeighsLayersOfOtherSizesByTokensPerByte) {
  // Layer 1's experts take 10 bytes: its 10 tokens in 40 bytes beat layer 3's 32 in 400.
  const std::vector<std::uint64_t> sizes{0, 10, 100, 100};
  const plan::LlamaOffload plan = plan::plan_llama_offload(loads(), sizes, 440);
  EXPECT_EQ(plan.whole_layers.gpu_layers, (std::vector<std::int64_t>{1, 3}));
  EXPECT_EQ(plan.whole_layers.bytes, 440u);
  EXPECT_DOUBLE_EQ(plan.whole_layers.share, 42.0 / 62);
  EXPECT_EQ(plan.n_cpu_moe, 3);
  // Per expert: 30 (100) + 10 (10) + 5 + 5 + 5 (300) = 410 bytes; a fourth five does not fit.
  EXPECT_EQ(plan.expert_bytes_used, 410u);
  EXPECT_DOUBLE_EQ(plan.expert_share, 55.0 / 62);
}

TEST(LlamaOffload, RefusesSizesThatDoNotFitTheCounts) {
  expect_error(
      [] {
        plan::plan_llama_offload(loads(), std::vector<std::uint64_t>{1, 1}, 10);
      },
      {"2 layers", "the counts have 4"});
  expect_error(
      [] {
        plan::plan_llama_offload(loads(), std::vector<std::uint64_t>{0, 0, 1, 1}, 10);
      },
      {"layer 1 routes tokens", "0 bytes"});
}

TEST(LlamaOffload, TheOverrideMatchesTheExpertTensorsOfCpuLayersOnly) {
  const std::vector<std::int64_t> moe{1, 2, 3, 11};
  const std::string text = plan::llama_cpu_override(std::vector<std::int64_t>{2, 3}, moe);
  EXPECT_EQ(text, "blk\\.(1|11)\\.ffn_.*_exps\\.=CPU");
  const std::regex pattern(text.substr(0, text.find('=')));
  for (const char* name : {"blk.1.ffn_gate_exps.weight", "blk.11.ffn_down_exps.weight",
                           "blk.1.ffn_gate_up_exps.weight"}) {
    EXPECT_TRUE(std::regex_search(name, pattern)) << name;
  }
  for (const char* name : {"blk.2.ffn_up_exps.weight", "blk.111.ffn_up_exps.weight",
                           "blk.1.ffn_gate_shexp.weight", "blk.1.ffn_gate_inp.weight"}) {
    EXPECT_FALSE(std::regex_search(name, pattern)) << name;
  }
  EXPECT_EQ(plan::llama_cpu_override(moe, moe), "");
}

TEST(LlamaOffloadCli, WritesTheArgumentsAndARankedProfile) {
  ScratchDir dir;
  io::write_file_atomically(dir.path() / "counts.json",
                            R"({"logical_count": [[0, 0, 0, 0], [10, 0, 0, 0], [5, 5, 5, 5],)"
                            R"( [30, 1, 1, 0]]})");
  const auto counts = quoted(dir.path() / "counts.json");
  const CliRun json = run_cli("llama-offload --stats " + counts +
                              " --expert-bytes 100 --vram-bytes 500 --json --profile " +
                              quoted(dir.path() / "p.csv"));
  ASSERT_EQ(json.code, 0) << json.err;
  const auto out = nlohmann::json::parse(json.out);
  EXPECT_EQ(out["override_tensor"], "blk\\.(1|2)\\.ffn_.*_exps\\.=CPU");
  EXPECT_EQ(out["n_cpu_moe"], 3);
  EXPECT_DOUBLE_EQ(out["whole_tensors"]["share"].get<double>(), 32.0 / 62);
  EXPECT_DOUBLE_EQ(out["per_expert"]["share"].get<double>(), 55.0 / 62);
  const std::string csv = read_whole_file(dir.path() / "p.csv");
  EXPECT_TRUE(
      csv.starts_with("rank,layer,expert,tokens,share,cumulative_share,bytes,on_gpu\n"
                      "1,3,0,30,"))
      << csv;
  EXPECT_NE(csv.find("\n12,3,3,0,0,1,100,0\n"), std::string::npos) << csv;

  // The expert size from a model's tensors: 3 F32 tensors of [8, 2, 4] per layer, 4 experts:
  // 3 x 8 x 2 x 4 bytes = 192 bytes an expert, 768 a layer.
  std::vector<gguf::Tensor> tensors;
  for (int layer = 1; layer <= 3; ++layer) {
    for (const char* part : {"gate", "up", "down"}) {
      tensors.push_back({"blk." + std::to_string(layer) + ".ffn_" + part + "_exps.weight",
                         {8, 2, 4},
                         0,
                         std::string(256, '\0')});
    }
  }
  // Names of no layer of the counts are not its experts: skipped, not misread.
  for (const char* name :
       {"blk.x.ffn_up_exps.weight", "blk.99999999999999999999.ffn_up_exps.weight",
        "blk.7.ffn_up_exps.weight"}) {
    tensors.push_back({name, {8, 2, 4}, 0, std::string(256, '\0')});
  }
  io::write_file_atomically(dir.path() / "model.gguf", gguf::file({}, tensors));
  const CliRun model = run_cli("llama-offload --stats " + counts + " --model " +
                               quoted(dir.path() / "model.gguf") + " --vram-bytes 1536");
  ASSERT_EQ(model.code, 0) << model.err;
  EXPECT_TRUE(contains(model.out, "2 of 3 MoE layers' expert tensors on the GPU (1536 bytes)"))
      << model.out;
  EXPECT_TRUE(contains(model.out, "-ngl 99 -ot 'blk\\.(1)\\.ffn_.*_exps\\.=CPU'")) << model.out;

  const CliRun profiled =
      run_cli("llama-offload --stats " + counts +
              " --expert-bytes 100 --vram-bytes 500 --profile " + quoted(dir.path() / "p.json"));
  ASSERT_EQ(profiled.code, 0) << profiled.err;
  const auto profile = nlohmann::json::parse(read_whole_file(dir.path() / "p.json"));
  EXPECT_EQ(profile["format"], "moestat.expert_profile");
  EXPECT_EQ(profile["version"], 1);
  EXPECT_EQ(profile["total_tokens"], 62.0);
  ASSERT_EQ(profile["experts"].size(), 12u);  // 3 MoE layers x 4 experts
  EXPECT_EQ(profile["experts"][1], nlohmann::json({{"rank", 2},
                                                   {"layer", 1},
                                                   {"expert", 0},
                                                   {"tokens", 10.0},
                                                   {"share", 10.0 / 62},
                                                   {"cumulative_share", 40.0 / 62},
                                                   {"bytes", 100},
                                                   {"on_gpu", true}}));

  const CliRun bad =
      run_cli("llama-offload --stats " + counts +
              " --expert-bytes 100 --vram-bytes 500 --profile " + quoted(dir.path() / "p.txt"));
  EXPECT_EQ(bad.code, 1);
  EXPECT_TRUE(contains(bad.err, "a profile is .json or .csv")) << bad.err;
}

}  // namespace
}  // namespace moestat::test
