// LlamaRecorder against real llama.cpp (CPU backend): tiny random-weight MoE models of two
// architectures (qwen3moe; qwen2moe, with a shared expert), written by tiny_moe_gguf.py, are run
// through llama_decode. The reference is independent of the recorded ids: a second callback,
// chained before the recorder's, reads each layer's router probabilities (`ffn_moe_probs-<il>`)
// and takes their top-k here.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <llama.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <moestat/io/files.hpp>
#include <moestat/io/snapshot_json.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/io/trace_file.hpp>
#include <moestat/llama_cpp/llama_recorder.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli/cli_run.hpp"
#include "io/test_support.hpp"
#include "unit/expect_error.hpp"

namespace {

namespace fs = std::filesystem;
using moestat::llama_cpp::LlamaRecorder;

constexpr std::int64_t kLayers = 3;
constexpr std::int64_t kExperts = 8;
constexpr std::int64_t kTopK = 2;
constexpr int kUbatch = 16;

/// The models, written once per test program into a scratch folder removed at exit.
class ModelFolder {
 public:
  ModelFolder() {
    for (const char* arch : {"qwen3moe", "qwen2moe"}) {
      const std::string command = std::string("PYTHONPATH='") + MOESTAT_LLAMA_GGUF_PY + "' '" +
                                  MOESTAT_PYTHON + "' '" + MOESTAT_TINY_MOE_GGUF + "' " + arch +
                                  " '" + path(arch).string() + "'";
      if (std::system(command.c_str()) != 0) throw std::runtime_error("failed: " + command);
    }
  }
  fs::path path(const std::string& arch) const { return dir_.path() / (arch + ".gguf"); }

 private:
  moestat::test::ScratchDir dir_;
};

fs::path model_path(const std::string& arch) {
  static const ModelFolder folder;
  return folder.path(arch);
}

/// The reference: the top-k of `ffn_moe_probs-<il>` (softmax router probabilities, [n_expert,
/// n_tokens]) of every row, per layer, in the order llama.cpp computed them.
struct ProbsTopk {
  bool on = false;
  int asked = 0;  ///< Nodes this callback was asked about while on.
  std::vector<std::vector<std::vector<int>>> rows =
      std::vector<std::vector<std::vector<int>>>(kLayers);

  static bool callback(ggml_tensor* tensor, bool ask, void* user_data) {
    auto& self = *static_cast<ProbsTopk*>(user_data);
    const std::string_view name(tensor->name);
    const std::string_view prefix = "ffn_moe_probs-";
    const bool wanted =
        self.on && name.starts_with(prefix) &&
        name.find_first_not_of("0123456789", prefix.size()) == std::string_view::npos;
    if (ask) {
      self.asked += self.on;
      return wanted;
    }
    const int layer = std::stoi(std::string(name.substr(prefix.size())));
    for (std::int64_t row = 0; row < tensor->ne[1]; ++row) {
      const auto* probs = reinterpret_cast<const float*>(static_cast<const char*>(tensor->data) +
                                                         row * tensor->nb[1]);
      std::vector<int> ids(std::size_t(tensor->ne[0]));
      std::iota(ids.begin(), ids.end(), 0);
      std::partial_sort(ids.begin(), ids.begin() + kTopK, ids.end(),
                        [&](int a, int b) { return probs[a] > probs[b]; });
      ids.resize(kTopK);
      std::sort(ids.begin(), ids.end());
      self.rows[std::size_t(layer)].push_back(ids);
    }
    return true;
  }

  /// [L, E] counts of every row recorded.
  std::vector<std::int64_t> counts() const {
    std::vector<std::int64_t> counts(kLayers * kExperts, 0);
    for (std::int64_t layer = 0; layer < kLayers; ++layer) {
      for (const auto& ids : rows[std::size_t(layer)]) {
        for (int id : ids) ++counts[std::size_t(layer * kExperts + id)];
      }
    }
    return counts;
  }
};

/// llama.cpp's log, shown with MOESTAT_TEST_LLAMA_LOG=1 (to see why a decode failed).
void test_log(ggml_log_level, const char* text, void*) {
  static const bool shown = std::getenv("MOESTAT_TEST_LLAMA_LOG") != nullptr;
  if (shown) std::fputs(text, stderr);
}

/// A model and a context whose eval callback is `probe` followed by the recorder.
class Llama {
 public:
  Llama(const std::string& arch, LlamaRecorder& recorder, ProbsTopk& probe) {
    llama_log_set(test_log, nullptr);
    llama_backend_init();
    model_ = llama_model_load_from_file(model_path(arch).c_str(), llama_model_default_params());
    if (model_ == nullptr) throw std::runtime_error("llama.cpp could not load " + arch);
    llama_context_params params = llama_context_default_params();
    params.n_ctx = 256;
    params.n_batch = 256;
    params.n_ubatch = kUbatch;
    params.n_threads = 1;
    params.n_threads_batch = 1;
    params.cb_eval = &ProbsTopk::callback;
    params.cb_eval_user_data = &probe;
    recorder.attach(params);
    context_ = llama_init_from_model(model_, params);
    if (context_ == nullptr) throw std::runtime_error("llama.cpp could not make a context");
  }
  ~Llama() {
    llama_free(context_);
    llama_model_free(model_);
  }
  Llama(const Llama&) = delete;
  Llama& operator=(const Llama&) = delete;

  const llama_model& model() const { return *model_; }

  std::vector<llama_token> tokenize(const std::string& text) const {
    // Spaces become "▁", three byte tokens here: a negative count asks for more room.
    std::vector<llama_token> tokens;
    int count = 0;
    do {
      tokens.resize(std::size_t(count < 0 ? -count : 1));
      count = llama_tokenize(llama_model_get_vocab(model_), text.data(), int(text.size()),
                             tokens.data(), int(tokens.size()), true, false);
    } while (count < 0);
    tokens.resize(std::size_t(count));
    return tokens;
  }

  /// Decodes `tokens` at positions from `first_position` on; `all_outputs`: every token
  /// requests output, else the last one only. llama_decode's result.
  int decode(const std::vector<llama_token>& tokens, int first_position, bool all_outputs) {
    llama_batch batch = llama_batch_init(int(tokens.size()), 0, 1);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      batch.token[i] = tokens[i];
      batch.pos[i] = first_position + int(i);
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = all_outputs || i + 1 == tokens.size();
    }
    batch.n_tokens = int(tokens.size());
    const int result = llama_decode(context_, batch);
    llama_batch_free(batch);
    return result;
  }

  /// Empties the context, as before a new prompt.
  void clear() { llama_memory_clear(llama_get_memory(context_), true); }

  /// What common_init_from_params does before a program's first decode: {bos, eos}, then the
  /// memory cleared.
  void warm_up() {
    const llama_vocab* vocab = llama_model_get_vocab(model_);
    ASSERT_EQ(decode({llama_vocab_bos(vocab), llama_vocab_eos(vocab)}, 0, true), 0);
    llama_memory_clear(llama_get_memory(context_), true);
  }

 private:
  llama_model* model_ = nullptr;
  llama_context* context_ = nullptr;
};

const std::string kPrompt =
    "Mixture-of-experts models route every token to a few experts; which ones?";

class LlamaRecorderTest : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Architectures, LlamaRecorderTest,
                         ::testing::Values("qwen3moe", "qwen2moe"));

TEST_P(LlamaRecorderTest, TopologyFromTheModel) {
  moestat::record::CpuRecorder unused(moestat::ModelTopology::uniform(kLayers, kExperts, kTopK));
  LlamaRecorder recorder(unused);
  ProbsTopk probe;
  Llama llama(GetParam(), recorder, probe);
  EXPECT_EQ(moestat::llama_cpp::model_topology(llama.model()),
            moestat::ModelTopology::uniform(kLayers, kExperts, kTopK));
}

// Counts equal the reference's over a prompt of several micro-batches and a few decode steps;
// the warm-up before start() is not among them.
TEST_P(LlamaRecorderTest, CountsEqualTheRoutersTopkAfterTheWarmUp) {
  moestat::record::CpuRecorder recorder(moestat::ModelTopology::uniform(kLayers, kExperts, kTopK),
                                        {.mode = moestat::RecordMode::kStat, .window_size = -1});
  LlamaRecorder llama_recorder(recorder);
  ProbsTopk probe;
  Llama llama(GetParam(), llama_recorder, probe);
  llama.warm_up();

  recorder.start();
  llama_recorder.start();
  probe.on = true;
  const std::vector<llama_token> prompt = llama.tokenize(kPrompt);
  ASSERT_GT(prompt.size(), std::size_t(2 * kUbatch));
  ASSERT_EQ(llama.decode(prompt, 0, true), 0);
  llama_recorder.end_pass();
  for (int step = 0; step < 4; ++step) {
    ASSERT_EQ(llama.decode({llama_token(3 + step)}, int(prompt.size()) + step, true), 0);
    llama_recorder.end_pass();
  }

  const moestat::Snapshot snapshot = recorder.snapshot();
  const std::int64_t micro_batches = (std::int64_t(prompt.size()) + kUbatch - 1) / kUbatch;
  EXPECT_EQ(llama_recorder.num_passes(), micro_batches + 4);
  EXPECT_EQ(snapshot.window_size(), micro_batches + 4);
  EXPECT_EQ(snapshot.logical_totals(), probe.counts());
  // Every layer counted every token k times: nothing of the warm-up, nothing twice.
  const std::int64_t tokens = std::int64_t(prompt.size()) + 4;
  for (std::int64_t layer = 0; layer < kLayers; ++layer) {
    const auto totals = snapshot.logical_totals();
    EXPECT_EQ(std::accumulate(totals.begin() + layer * kExperts,
                              totals.begin() + (layer + 1) * kExperts, std::int64_t(0)),
              tokens * kTopK)
        << "layer " << layer;
  }
}

// Per-token traces: token n of layer l holds the reference's top-k of that row.
TEST_P(LlamaRecorderTest, PerTokenTracesMatchTheRoutersTopk) {
  moestat::record::CpuRecorder recorder(moestat::ModelTopology::uniform(kLayers, kExperts, kTopK),
                                        {.mode = moestat::RecordMode::kPerToken});
  LlamaRecorder llama_recorder(recorder);
  ProbsTopk probe;
  Llama llama(GetParam(), llama_recorder, probe);
  llama.warm_up();

  recorder.start();
  llama_recorder.start();
  probe.on = true;
  const std::vector<llama_token> prompt = llama.tokenize(kPrompt);
  ASSERT_EQ(llama.decode(prompt, 0, true), 0);
  llama_recorder.end_pass();

  const moestat::Snapshot snapshot = recorder.snapshot();
  ASSERT_EQ(snapshot.num_tokens(), std::int64_t(prompt.size()));
  for (std::int64_t layer = 0; layer < kLayers; ++layer) {
    ASSERT_EQ(probe.rows[std::size_t(layer)].size(), prompt.size());
    for (std::int64_t token = 0; token < snapshot.num_tokens(); ++token) {
      const auto first = snapshot.token_logical_ids.begin() + (token * kLayers + layer) * kTopK;
      std::vector<int> ids(first, first + kTopK);
      std::sort(ids.begin(), ids.end());
      EXPECT_EQ(ids, probe.rows[std::size_t(layer)][std::size_t(token)])
          << "token " << token << ", layer " << layer;
    }
  }
}

// With output on the last token only, llama.cpp's last layer routes that token alone, and the
// micro-batches before it route none there (0 rows): counts record what was routed.
TEST_P(LlamaRecorderTest, LastLayerCountsOnlyTheOutputToken) {
  moestat::record::CpuRecorder recorder(moestat::ModelTopology::uniform(kLayers, kExperts, kTopK),
                                        {.mode = moestat::RecordMode::kStat, .window_size = -1});
  LlamaRecorder llama_recorder(recorder);
  ProbsTopk probe;
  Llama llama(GetParam(), llama_recorder, probe);
  recorder.start();
  llama_recorder.start();
  probe.on = true;
  const std::vector<llama_token> prompt = llama.tokenize(kPrompt);
  ASSERT_EQ(llama.decode(prompt, 0, false), 0);
  llama_recorder.end_pass();

  const auto totals = recorder.snapshot().logical_totals();
  EXPECT_EQ(totals, probe.counts());
  EXPECT_EQ(probe.rows[kLayers - 1].size(), 1u);
  EXPECT_EQ(
      std::accumulate(totals.begin() + (kLayers - 1) * kExperts, totals.end(), std::int64_t(0)),
      kTopK);
}

// Per-token traces cannot place a layer that routed only the output tokens: the graph's
// computation stops there (llama.cpp's scheduler still reports success, so llama_decode's
// result says nothing), nothing is recorded, and end_pass says why.
TEST_P(LlamaRecorderTest, PerTokenRefusesALayerWithoutEveryToken) {
  moestat::record::CpuRecorder recorder(moestat::ModelTopology::uniform(kLayers, kExperts, kTopK),
                                        {.mode = moestat::RecordMode::kPerToken});
  LlamaRecorder llama_recorder(recorder);
  ProbsTopk probe;
  Llama llama(GetParam(), llama_recorder, probe);
  recorder.start();
  llama_recorder.start();
  llama.decode(llama.tokenize("a few tokens"), 0, false);
  EXPECT_MOESTAT_ERROR(llama_recorder.end_pass(), "per-token traces need every token");
  EXPECT_EQ(recorder.snapshot().num_tokens(), 0);
}

// Not recording, the recorder asks for no node, and the chained callback still gets its own.
TEST_P(LlamaRecorderTest, StoppedAsksForNothingAndKeepsTheChainedCallback) {
  moestat::record::CpuRecorder recorder(moestat::ModelTopology::uniform(kLayers, kExperts, kTopK));
  LlamaRecorder llama_recorder(recorder);
  ProbsTopk probe;
  Llama llama(GetParam(), llama_recorder, probe);
  recorder.start();
  probe.on = true;
  const std::vector<llama_token> prompt = llama.tokenize(kPrompt);
  ASSERT_EQ(llama.decode(prompt, 0, true), 0);
  llama_recorder.end_pass();
  EXPECT_EQ(llama_recorder.num_passes(), 0);
  EXPECT_EQ(probe.rows[0].size(), prompt.size());
  EXPECT_GT(probe.asked, 0);
}

// `moestat llama-record` writes the counts of the same micro-batches: each prompt from an empty
// context, every token an output, micro-batches of --batch tokens.
TEST_P(LlamaRecorderTest, CommandCountsEqualTheRoutersTopk) {
  const std::vector<std::string> prompts{kPrompt, "A second, shorter prompt."};
  moestat::test::ScratchDir dir;
  {
    std::ofstream file(dir.path() / "prompts.txt");
    file << prompts[0] << "\n\n" << prompts[1] << "\r\n";
  }
  const moestat::test::CliRun run = moestat::test::run_cli(
      fmt::format("llama-record {} --prompts {} --out {} --batch {} --threads 1 --ctx 256",
                  moestat::test::quoted(model_path(GetParam())),
                  moestat::test::quoted(dir.path() / "prompts.txt"),
                  moestat::test::quoted(dir.path() / "out"), kUbatch));
  ASSERT_EQ(run.code, 0) << run.err;

  moestat::record::CpuRecorder unused(moestat::ModelTopology::uniform(kLayers, kExperts, kTopK));
  LlamaRecorder recorder(unused);
  ProbsTopk probe;
  Llama llama(GetParam(), recorder, probe);
  probe.on = true;
  std::int64_t micro_batches = 0;
  for (const std::string& prompt : prompts) {
    llama.clear();
    const std::vector<llama_token> tokens = llama.tokenize(prompt);
    ASSERT_EQ(llama.decode(tokens, 0, true), 0);
    micro_batches += (std::int64_t(tokens.size()) + kUbatch - 1) / kUbatch;
  }
  const moestat::CountWindow counts =
      moestat::io::read_counts(dir.path() / "out/logical_count.json");
  EXPECT_EQ(counts.window_size, micro_batches);
  EXPECT_EQ(counts.totals(), probe.counts());
  for (const char* name : {"snapshot.json", "logical_count.pt", "report.html"}) {
    EXPECT_TRUE(fs::is_regular_file(dir.path() / "out" / name)) << name;
  }
}

// `moestat llama-offload` plans from a per-token recording as from its counts: the per_token
// snapshot JSON and a trace file of the same tokens give the plan and profile the counts give.
TEST_P(LlamaRecorderTest, OffloadFromPerTokenRecordingsEqualsOffloadFromTheirCounts) {
  moestat::record::CpuRecorder recorder(moestat::ModelTopology::uniform(kLayers, kExperts, kTopK),
                                        {.mode = moestat::RecordMode::kPerToken});
  LlamaRecorder llama_recorder(recorder);
  ProbsTopk probe;
  Llama llama(GetParam(), llama_recorder, probe);
  recorder.start();
  llama_recorder.start();
  probe.on = true;
  const std::vector<llama_token> prompt = llama.tokenize(kPrompt);
  ASSERT_EQ(llama.decode(prompt, 0, true), 0);
  llama_recorder.end_pass();
  const moestat::Snapshot snapshot = recorder.snapshot();
  ASSERT_EQ(snapshot.num_tokens(), std::int64_t(prompt.size()));

  moestat::test::ScratchDir dir;
  moestat::io::write_file_atomically(dir.path() / "tokens.json",
                                     moestat::io::snapshot_to_json(snapshot));
  {
    moestat::io::TraceWriter writer(dir.path() / "tokens.trace", {.num_layers = kLayers,
                                                                  .num_logical_experts = kExperts,
                                                                  .num_physical_experts = kExperts,
                                                                  .top_k = kTopK});
    // Two chunks, as two passes would write them.
    const std::size_t half = (prompt.size() / 2) * kLayers * kTopK;
    const std::span<const std::int32_t> ids(snapshot.token_physical_ids);
    writer.append(0, 0, ids.first(half));
    writer.append(1, 0, ids.subspan(half));
  }
  moestat::CountWindow counts{.num_layers = kLayers, .num_experts = kExperts};
  counts.counts = probe.counts();
  moestat::io::write_counts(dir.path() / "counts.json", counts);

  // The JSON plan and the profile, written to the same path each time (the plan names it).
  auto offload = [&](const std::string& stats) {
    fs::remove(dir.path() / "profile.csv");
    const moestat::test::CliRun run = moestat::test::run_cli(fmt::format(
        "llama-offload --stats {} --expert-bytes 100 --vram-bytes 850 --json --profile {}",
        moestat::test::quoted(dir.path() / stats),
        moestat::test::quoted(dir.path() / "profile.csv")));
    EXPECT_EQ(run.code, 0) << run.err;
    return run.out + moestat::test::read_whole_file(dir.path() / "profile.csv");
  };
  const std::string from_counts = offload("counts.json");
  EXPECT_NE(from_counts.find("on_gpu"), std::string::npos) << from_counts;
  EXPECT_EQ(offload("tokens.json"), from_counts);
  EXPECT_EQ(offload("tokens.trace"), from_counts);

  // A trace of replicas (P > E) holds slot ids: refused, saying so.
  {
    moestat::io::TraceWriter writer(dir.path() / "replicas.trace",
                                    {.num_layers = kLayers,
                                     .num_logical_experts = kExperts,
                                     .num_physical_experts = kExperts + 2,
                                     .top_k = kTopK});
    writer.append(0, 0, std::span<const std::int32_t>(snapshot.token_physical_ids));
  }
  const moestat::test::CliRun replicas = moestat::test::run_cli(
      fmt::format("llama-offload --stats {} --expert-bytes 100 --vram-bytes 850",
                  moestat::test::quoted(dir.path() / "replicas.trace")));
  EXPECT_NE(replicas.code, 0);
  EXPECT_NE(replicas.err.find("holds slot ids"), std::string::npos) << replicas.err;
}

// Prompts it cannot run are refused by name, and the directory it made is removed again.
TEST(LlamaRecordCommand, RefusesPromptsItCannotRun) {
  moestat::test::ScratchDir dir;
  const auto run = [&](const std::string& prompts, const std::string& options) {
    std::ofstream(dir.path() / "prompts.txt") << prompts;
    return moestat::test::run_cli(fmt::format("llama-record {} --prompts {} --out {} {}",
                                              moestat::test::quoted(model_path("qwen3moe")),
                                              moestat::test::quoted(dir.path() / "prompts.txt"),
                                              moestat::test::quoted(dir.path() / "out"), options));
  };
  moestat::test::CliRun empty = run("\n\r\n", "");
  EXPECT_EQ(empty.code, 1);
  EXPECT_TRUE(moestat::test::contains(empty.err, "has no prompt")) << empty.err;
  // "ab" is <s> ▁ a b: 1 + 3 + 2 tokens (▁ is three byte tokens in this vocabulary).
  moestat::test::CliRun long_prompt =
      run("ab\nthis one is longer than twelve tokens\n", "--ctx 12");
  EXPECT_EQ(long_prompt.code, 1);
  EXPECT_TRUE(moestat::test::contains(long_prompt.err, "prompt 2 of")) << long_prompt.err;
  EXPECT_TRUE(moestat::test::contains(long_prompt.err, "more than --ctx 12")) << long_prompt.err;
  EXPECT_FALSE(fs::exists(dir.path() / "out"));
  moestat::test::CliRun no_model = moestat::test::run_cli(fmt::format(
      "llama-record {} --prompts {} --out {}", moestat::test::quoted(dir.path() / "none.gguf"),
      moestat::test::quoted(dir.path() / "prompts.txt"),
      moestat::test::quoted(dir.path() / "out")));
  EXPECT_EQ(no_model.code, 1);
  EXPECT_TRUE(moestat::test::contains(no_model.err, "could not load the model")) << no_model.err;
}

/// A tensor as llama.cpp hands it to the callback: `name`, I32 [columns, rows] in ggml's order,
/// rows `row_stride` ids apart, in host memory (no backend buffer).
ggml_tensor host_tensor(const char* name, std::vector<std::int32_t>& ids, std::int64_t columns,
                        std::int64_t rows, std::int64_t row_stride) {
  ggml_tensor tensor{};
  tensor.type = GGML_TYPE_I32;
  tensor.ne[0] = columns;
  tensor.ne[1] = rows;
  tensor.ne[2] = tensor.ne[3] = 1;
  tensor.nb[0] = sizeof(std::int32_t);
  tensor.nb[1] = std::size_t(row_stride) * sizeof(std::int32_t);
  tensor.nb[2] = tensor.nb[3] = tensor.nb[1] * std::size_t(rows);
  tensor.data = ids.data();
  std::snprintf(tensor.name, sizeof(tensor.name), "%s", name);
  return tensor;
}

/// The callback as llama.cpp's scheduler calls it: ask, then the data if wanted.
bool evaluate(ggml_tensor& tensor, LlamaRecorder& recorder) {
  if (!LlamaRecorder::eval_callback(&tensor, true, &recorder)) return true;
  return LlamaRecorder::eval_callback(&tensor, false, &recorder);
}

// Only `ffn_moe_topk-<layer>` is asked for, read with its row stride (the argsort's n_expert
// ids, not top-k), attributed to the layer of its name; a 0-row layer counts nothing.
TEST(LlamaRecorderCallback, ReadsTheTopkViewOfItsLayerOnly) {
  moestat::record::CpuRecorder recorder(moestat::ModelTopology::uniform(3, 4, 2),
                                        {.mode = moestat::RecordMode::kStat, .window_size = -1});
  LlamaRecorder llama_recorder(recorder);
  recorder.start();
  llama_recorder.start();
  // Two tokens; each row holds all 4 ids of the argsort, of which the view shows 2.
  std::vector<std::int32_t> ids{3, 1, 0, 2, 2, 3, 1, 0};
  for (const char* other : {"ffn_moe_group_topk-1", "ffn_moe_topk-1 (view)", "ffn_moe_topk-",
                            "ffn_moe_topk-x", "ffn_moe_probs-1", "ffn_moe_topk-1x"}) {
    ggml_tensor tensor = host_tensor(other, ids, 2, 2, 4);
    EXPECT_FALSE(LlamaRecorder::eval_callback(&tensor, true, &llama_recorder)) << other;
  }
  ggml_tensor layer1 = host_tensor("ffn_moe_topk-1", ids, 2, 2, 4);
  ggml_tensor layer2_empty = host_tensor("ffn_moe_topk-2", ids, 2, 0, 4);
  EXPECT_TRUE(evaluate(layer1, llama_recorder));
  EXPECT_TRUE(evaluate(layer2_empty, llama_recorder));
  llama_recorder.end_pass();
  EXPECT_EQ(recorder.snapshot().logical_totals(),
            (std::vector<std::int64_t>{0, 0, 0, 0, 0, 1, 1, 2, 0, 0, 0, 0}));
}

// A layer at or below the last one starts the next micro-batch's pass.
TEST(LlamaRecorderCallback, ANewMicroBatchStartsANewPass) {
  moestat::record::CpuRecorder recorder(moestat::ModelTopology::uniform(2, 4, 1),
                                        {.mode = moestat::RecordMode::kStat, .window_size = -1});
  LlamaRecorder llama_recorder(recorder);
  recorder.start();
  llama_recorder.start();
  std::vector<std::int32_t> ids{1};
  ggml_tensor layer0 = host_tensor("ffn_moe_topk-0", ids, 1, 1, 1);
  ggml_tensor layer1 = host_tensor("ffn_moe_topk-1", ids, 1, 1, 1);
  for (ggml_tensor* tensor : {&layer0, &layer1, &layer0, &layer1, &layer1}) {
    EXPECT_TRUE(evaluate(*tensor, llama_recorder));
  }
  llama_recorder.end_pass();
  EXPECT_EQ(llama_recorder.num_passes(), 3);
  EXPECT_EQ(recorder.snapshot().window_size(), 3);
}

// A layer outside the topology stops the graph (false) and is reported by end_pass; nothing
// more is asked for until then, and the broken pass is not recorded.
TEST(LlamaRecorderCallback, AnErrorStopsTheGraphAndIsReportedOnce) {
  moestat::record::CpuRecorder recorder(moestat::ModelTopology::uniform(2, 4, 1));
  LlamaRecorder llama_recorder(recorder);
  recorder.start();
  llama_recorder.start();
  std::vector<std::int32_t> ids{1};
  ggml_tensor layer0 = host_tensor("ffn_moe_topk-0", ids, 1, 1, 1);
  ggml_tensor layer7 = host_tensor("ffn_moe_topk-7", ids, 1, 1, 1);
  EXPECT_TRUE(evaluate(layer0, llama_recorder));
  EXPECT_FALSE(evaluate(layer7, llama_recorder));
  EXPECT_FALSE(LlamaRecorder::eval_callback(&layer0, true, &llama_recorder));
  EXPECT_MOESTAT_ERROR(llama_recorder.end_pass(), "layer 7");
  EXPECT_NO_THROW(llama_recorder.end_pass());
  EXPECT_EQ(recorder.snapshot().window_size(), 0);
}

TEST(LlamaRecorder, AttachesOnce) {
  moestat::record::CpuRecorder recorder(moestat::ModelTopology::uniform(kLayers, kExperts, kTopK));
  LlamaRecorder first(recorder);
  LlamaRecorder second(recorder);
  llama_context_params params = llama_context_default_params();
  first.attach(params);
  EXPECT_MOESTAT_ERROR(first.attach(params), "already attached");
  EXPECT_MOESTAT_ERROR(second.attach(params), "already hold a LlamaRecorder's callback");
}

}  // namespace
