// `moestat llama-record MODEL.gguf --prompts FILE --out DIR`: runs a GGUF model in llama.cpp over
// a file of prompts (as llama-imatrix runs its calibration text) and records which experts
// every layer routes each token to, through the llama_cpp component (LlamaRecorder), into the
// files the other commands read. Built only with llama.cpp (docs/llama-cpp.md).
#include <fmt/format.h>
#include <llama.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <moestat/error.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/snapshot_json.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/llama_cpp/llama_recorder.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/report.hpp>
#include <optional>
#include <string>
#include <vector>

#include "command.hpp"
#include "output_files.hpp"

namespace moestat::cli {
namespace {

constexpr std::array<const char*, 4> kFiles{"snapshot.json", "logical_count.pt",
                                            "logical_count.json", "report.html"};

/// The non-empty lines of `path`, without a trailing carriage return.
std::vector<std::string> read_prompts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MOESTAT_CHECK(in.is_open(), "cannot open the prompts file {}", path);
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) prompts.push_back(std::move(line));
  }
  MOESTAT_CHECK(!in.bad(), "cannot read the prompts file {}", path);
  MOESTAT_CHECK(!prompts.empty(), "the prompts file {} has no prompt (one per line)", path);
  return prompts;
}

/// llama.cpp's errors go to stderr; its progress lines are dropped.
void log_errors(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

/// A llama_batch of up to `size` tokens of one sequence, freed with the object.
struct Batch {
  explicit Batch(std::int32_t size) : batch(llama_batch_init(size, 0, 1)) {}
  ~Batch() { llama_batch_free(batch); }
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  llama_batch batch;
};

struct ModelFree {
  void operator()(llama_model* model) const { llama_model_free(model); }
};
struct ContextFree {
  void operator()(llama_context* context) const { llama_free(context); }
};

/// The tokens of `text`, with the model's BOS where it wants one.
std::vector<llama_token> tokenize(const llama_vocab& vocab, const std::string& text) {
  MOESTAT_CHECK(text.size() < std::size_t(INT32_MAX), "a prompt of {} bytes is too long",
                text.size());
  std::vector<llama_token> tokens(text.size() + 2);
  int count = llama_tokenize(&vocab, text.data(), int(text.size()), tokens.data(),
                             int(tokens.size()), true, false);
  if (count < 0) {  // more tokens than bytes (byte fallback): the size is -count
    tokens.resize(std::size_t(-count));
    count = llama_tokenize(&vocab, text.data(), int(text.size()), tokens.data(), int(tokens.size()),
                           true, false);
  }
  MOESTAT_CHECK(count >= 0, "llama.cpp could not tokenize a prompt");
  tokens.resize(std::size_t(count));
  return tokens;
}

class LlamaRecordCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand(
        "llama-record",
        "Run a GGUF model in llama.cpp over a file of prompts and record the experts every "
        "layer routes each token to");
    sub->add_option("MODEL", model_, "The model, a GGUF file llama.cpp loads")->required();
    sub->add_option("--prompts", prompts_, "Text file, one prompt per line (empty lines skipped)")
        ->required();
    sub->add_option("--out", out_dir_,
                    "Directory for snapshot.json, logical_count.pt and .json (SGLang's stat "
                    "dump) and report.html (created if missing)")
        ->required();
    sub->add_option("--ctx", num_ctx_, "Context length: the longest prompt, in tokens")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{INT32_MAX}))
        ->capture_default_str();
    sub->add_option("--batch", num_batch_,
                    "Tokens per llama.cpp micro-batch (n_batch = n_ubatch): one recorded pass")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{INT32_MAX}))
        ->capture_default_str();
    sub->add_option("--threads", num_threads_, "CPU threads (llama.cpp's default if not given)")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{4096}));
    sub->add_option("--gpus", num_gpus_,
                    "GPUs the report spreads the experts over (must divide the experts)")
        ->check(kPositive)
        ->capture_default_str();
    sub->footer(
        "Every token requests output, so llama.cpp's last layer routes every token as the\n"
        "others do (it otherwise routes only the tokens that produce logits). Each prompt\n"
        "starts from an empty context; each micro-batch is one pass of the recording.\n\n"
        "Example:\n"
        "  moestat llama-record model.gguf --prompts prompts.txt --out llama-out\n"
        "  moestat hot-experts --stats llama-out/logical_count.json --strategy layer-balanced \\\n"
        "      --ratio 0.25 --out mask.json");
    return sub;
  }

  int run() override {
    OutputDirectory out(out_dir_, {kFiles.begin(), kFiles.end()});
    const std::filesystem::path& dir = out.path();
    std::vector<std::filesystem::path> outputs;
    for (const char* name : kFiles) outputs.push_back(dir / name);
    check_outputs(outputs, std::vector<std::string>{model_, prompts_});
    const std::vector<std::string> prompts = read_prompts(prompts_);

    llama_log_set(log_errors, nullptr);
    llama_backend_init();
    const std::unique_ptr<llama_model, ModelFree> model(
        llama_model_load_from_file(model_.c_str(), llama_model_default_params()));
    MOESTAT_CHECK(model != nullptr, "llama.cpp could not load the model {}", model_);
    const ModelTopology topology = llama_cpp::model_topology(*model);
    std::array<char, 256> description{};
    llama_model_desc(model.get(), description.data(), description.size());
    fmt::print("model: {} ({}), {} layers ({} MoE), {} experts, top-{}\n", model_,
               description.data(), topology.num_layers, topology.num_moe_layers(),
               topology.num_logical_experts, topology.top_k);

    record::CpuRecorder recorder(topology, {.mode = RecordMode::kStat, .window_size = -1});
    llama_cpp::LlamaRecorder llama_recorder(recorder);
    llama_context_params params = llama_context_default_params();
    params.n_ctx = std::uint32_t(num_ctx_);
    params.n_batch = params.n_ubatch = std::uint32_t(num_batch_);
    if (num_threads_) params.n_threads = params.n_threads_batch = std::int32_t(*num_threads_);
    llama_recorder.attach(params);
    const std::unique_ptr<llama_context, ContextFree> context(
        llama_init_from_model(model.get(), params));
    MOESTAT_CHECK(context != nullptr, "llama.cpp could not make a context for {}", model_);

    recorder.start();
    llama_recorder.start();
    const auto start = std::chrono::steady_clock::now();
    std::int64_t num_tokens = 0;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      num_tokens += run_prompt(*context, i + 1, prompts[i], llama_recorder);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    llama_recorder.stop();
    recorder.stop();
    const Snapshot snapshot = recorder.snapshot();
    fmt::print(
        "recorded: {} prompts, {} tokens in {} passes (micro-batches of up to {}), {:.2f} s\n",
        prompts.size(), num_tokens, snapshot.window_size(), num_batch_, seconds);

    io::write_file_atomically(dir / "snapshot.json", io::snapshot_to_json(snapshot));
    const CountWindow counts = count_window_of(snapshot);
    io::write_counts(dir / "logical_count.pt", counts);
    io::write_counts(dir / "logical_count.json", counts);
    const report::Recording recording = report::load_recording(dir / "snapshot.json");
    io::write_file_atomically(dir / "report.html",
                              report::render_html(recording, {.num_gpus = num_gpus_}));
    fmt::print("wrote: {}/ snapshot.json, logical_count.pt and .json, report.html\n", dir.string());
    out.keep();
    return kExitOk;
  }

 private:
  /// Decodes prompt `number` from an empty context in micro-batches, every token an output;
  /// returns its tokens.
  std::int64_t run_prompt(llama_context& context, std::size_t number, const std::string& prompt,
                          llama_cpp::LlamaRecorder& llama_recorder) const {
    llama_memory_clear(llama_get_memory(&context), true);
    const std::vector<llama_token> tokens =
        tokenize(*llama_model_get_vocab(llama_get_model(&context)), prompt);
    MOESTAT_CHECK(std::int64_t(tokens.size()) <= num_ctx_,
                  "prompt {} of {} has {} tokens, more than --ctx {}", number, prompts_,
                  tokens.size(), num_ctx_);
    Batch owned{std::int32_t(num_batch_)};
    llama_batch& batch = owned.batch;
    for (std::size_t first = 0; first < tokens.size(); first += std::size_t(num_batch_)) {
      const std::size_t size = std::min(tokens.size() - first, std::size_t(num_batch_));
      for (std::size_t i = 0; i < size; ++i) {
        batch.token[i] = tokens[first + i];
        batch.pos[i] = llama_pos(first + i);
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
      }
      batch.n_tokens = std::int32_t(size);
      const int result = llama_decode(&context, batch);
      // The recorder's own error first: it is why a decode stopped.
      llama_recorder.end_pass();
      MOESTAT_CHECK(result == 0, "llama.cpp failed to decode prompt {} of {} (llama_decode: {})",
                    number, prompts_, result);
    }
    return std::int64_t(tokens.size());
  }

  std::string model_;
  std::string prompts_;
  std::string out_dir_;
  std::int64_t num_ctx_ = 2048;
  std::int64_t num_batch_ = 512;
  std::optional<std::int64_t> num_threads_;
  std::int64_t num_gpus_ = 1;
};

}  // namespace

std::unique_ptr<Command> make_llama_record_command() {
  return std::make_unique<LlamaRecordCommand>();
}

}  // namespace moestat::cli
