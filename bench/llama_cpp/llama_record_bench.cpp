// What recording costs inside llama.cpp: tokens per second of a prompt pass and of a decode,
// with the eval callback unset (the baseline) and with each way of setting it, measured in the
// same run, modes interleaved repeat by repeat so that drift on a shared machine falls on
// every mode alike (docs/BENCHMARKS.md; bench/llama_cpp_bench.sh makes the model and runs it).
//
//   moestat_bench_llama MODEL.gguf [--threads N] [--prompt-tokens P] [--decode-tokens D]
//                       [--repeats R] [--gpu-layers N]
//
// Modes (one llama_context each, all of the same model):
//   off        no cb_eval: llama.cpp computes each graph split in one call
//   stopped    LlamaRecorder attached, not recording: asked about every node, wants none
//   stat       LlamaRecorder recording counts (CpuRecorder, stat): wants ffn_moe_topk-<il>,
//              one per MoE layer per micro-batch
//   per_token  the same, per-token traces
//   moe_nodes  for scale: a callback that wants every ffn_moe_* node of every layer (what a
//              tracer reading logits, probabilities, ids and weights would ask for), doing
//              nothing with them
//   cuda_rec   (a CUDA build, --gpu-layers > 0) the ids counted where they are, in device
//              memory, by moestat's CudaRecorder on a stream of its own, which the callback
//              then synchronises (llama.cpp may reuse the ids' memory once it returns): the
//              alternative to `stat`, which copies them to the host (ggml_backend_tensor_get)
// A prompt pass: P random tokens from an empty context, one micro-batch, every token an output
// (per-token traces need them; the byte vocabulary's output head costs next to nothing).
// A decode: D single-token decodes after it. The modes take turns at every prompt pass and
// every decode step. Output, in wall time and in CPU time: per mode the median tokens/s and the
// median of its ratio to `off`'s in the same turn (MOESTAT_BENCH_VERBOSE=1: progress).
#include <fmt/format.h>
#include <llama.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <moestat/llama_cpp/llama_recorder.hpp>
#include <moestat/record/cpu_recorder.hpp>
#if defined(MOESTAT_HAS_CUDA)
#include <cuda_runtime_api.h>

#include <moestat/record/cuda_recorder.hpp>
#endif
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model;
  int threads = 0;
  int prompt_tokens = 512;
  int decode_tokens = 64;
  int repeats = 5;
  int gpu_layers = 0;
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg(argv[i]);
    auto value = [&]() -> int {
      if (i + 1 >= argc) throw std::runtime_error(std::string(arg) + " needs a value");
      return std::atoi(argv[++i]);
    };
    if (arg == "--threads") {
      options.threads = value();
    } else if (arg == "--prompt-tokens") {
      options.prompt_tokens = value();
    } else if (arg == "--decode-tokens") {
      options.decode_tokens = value();
    } else if (arg == "--repeats") {
      options.repeats = value();
    } else if (arg == "--gpu-layers") {
      options.gpu_layers = value();
    } else if (options.model.empty() && !arg.starts_with("--")) {
      options.model = arg;
    } else {
      throw std::runtime_error("unknown argument " + std::string(arg));
    }
  }
  if (options.model.empty()) {
    throw std::runtime_error(
        "usage: moestat_bench_llama MODEL.gguf [--threads N] [--prompt-tokens P] "
        "[--decode-tokens D] [--repeats R] [--gpu-layers N]");
  }
  return options;
}

/// CPU seconds of every thread of this process.
double cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return double(now.tv_sec) + double(now.tv_nsec) * 1e-9;
}

void quiet(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

/// Wants every `ffn_moe_*` node, reads nothing.
bool moe_nodes_callback(ggml_tensor* tensor, bool ask, void*) {
  if (ask) return std::strncmp(ggml_get_name(tensor), "ffn_moe_", 8) == 0;
  return true;
}

/// The layer of a `ffn_moe_topk-<layer>` name, or -1.
int topk_layer(const char* name) {
  constexpr std::string_view kPrefix = "ffn_moe_topk-";
  const std::string_view view(name);
  if (!view.starts_with(kPrefix) || view.size() == kPrefix.size() ||
      view.find_first_not_of("0123456789", kPrefix.size()) != std::string_view::npos) {
    return -1;
  }
  return std::atoi(name + kPrefix.size());
}

#if defined(MOESTAT_HAS_CUDA)
/// Counts the ids in device memory with a CudaRecorder on its own stream, synchronised before
/// the callback returns. One pass per llama_decode (one micro-batch here).
struct CudaCounting {
  std::unique_ptr<moestat::record::CudaRecorder> recorder;
  cudaStream_t stream = nullptr;
  int layer = -1;
  std::int64_t passes = 0;

  static bool callback(ggml_tensor* tensor, bool ask, void* user_data) {
    auto& self = *static_cast<CudaCounting*>(user_data);
    if (ask) return (self.layer = topk_layer(ggml_get_name(tensor))) >= 0;
    const std::array<std::int64_t, 2> shape{tensor->ne[1], tensor->ne[0]};
    const std::array<std::int64_t, 2> strides{std::int64_t(tensor->nb[1] / 4),
                                              std::int64_t(tensor->nb[0] / 4)};
    self.recorder->record_topk(
        self.layer, moestat::TensorView(tensor->data, moestat::DType::kInt32, shape, strides,
                                        moestat::Device::cuda(0)));
    return cudaStreamSynchronize(self.stream) == cudaSuccess;
  }
};
#endif

enum class Mode { kOff, kStopped, kStat, kPerToken, kMoeNodes, kCudaRecorder };
constexpr Mode kModes[] = {Mode::kOff,      Mode::kStopped,  Mode::kStat,
                           Mode::kPerToken, Mode::kMoeNodes, Mode::kCudaRecorder};

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::kOff:
      return "off";
    case Mode::kStopped:
      return "stopped";
    case Mode::kStat:
      return "stat";
    case Mode::kPerToken:
      return "per_token";
    case Mode::kMoeNodes:
      return "moe_nodes";
    case Mode::kCudaRecorder:
      return "cuda_rec";
  }
  return "?";
}

/// One context of the model and what records into it.
class Runner {
 public:
  Runner(llama_model& model, const Options& options, Mode mode) {
    const moestat::ModelTopology topology = moestat::llama_cpp::model_topology(model);
    if (mode == Mode::kStopped || mode == Mode::kStat || mode == Mode::kPerToken) {
      moestat::RecorderOptions recorder_options;
      recorder_options.mode =
          mode == Mode::kPerToken ? moestat::RecordMode::kPerToken : moestat::RecordMode::kStat;
      recorder_options.window_size = 1000;
      recorder_options.per_token_capacity = 1 << 16;
      recorder_ = std::make_unique<moestat::record::CpuRecorder>(topology, recorder_options);
      llama_recorder_ = std::make_unique<moestat::llama_cpp::LlamaRecorder>(*recorder_);
    }
    llama_context_params params = llama_context_default_params();
    params.n_ctx = std::uint32_t(options.prompt_tokens + options.decode_tokens + 16);
    params.n_batch = params.n_ubatch = std::uint32_t(options.prompt_tokens);
    if (options.threads > 0) params.n_threads = params.n_threads_batch = options.threads;
    if (llama_recorder_) llama_recorder_->attach(params);
    if (mode == Mode::kMoeNodes) params.cb_eval = &moe_nodes_callback;
#if defined(MOESTAT_HAS_CUDA)
    if (mode == Mode::kCudaRecorder) {
      cuda_ = std::make_unique<CudaCounting>();
      cuda_->recorder = std::make_unique<moestat::record::CudaRecorder>(
          topology,
          moestat::RecorderOptions{.mode = moestat::RecordMode::kStat, .window_size = 1000});
      if (cudaStreamCreateWithFlags(&cuda_->stream, cudaStreamNonBlocking) != cudaSuccess) {
        throw std::runtime_error("cudaStreamCreate failed");
      }
      cuda_->recorder->set_stream(cuda_->stream);
      cuda_->recorder->start();
      params.cb_eval = &CudaCounting::callback;
      params.cb_eval_user_data = cuda_.get();
    }
#endif
    context_ = llama_init_from_model(&model, params);
    if (context_ == nullptr) throw std::runtime_error("llama.cpp could not make a context");
    if (recorder_) recorder_->start();
    if (mode == Mode::kStat || mode == Mode::kPerToken) llama_recorder_->start();
  }
  ~Runner() { llama_free(context_); }
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  /// Wall and CPU seconds (every thread of the process) of one llama_decode.
  struct Times {
    double wall, cpu;
  };
  /// The prompt from an empty context. Every token an output, as per-token traces need (and
  /// llama-record asks); the byte vocabulary makes the output head's cost negligible.
  Times prompt(const std::vector<llama_token>& tokens) {
    llama_memory_clear(llama_get_memory(context_), true);
    position_ = int(tokens.size());
    return timed([&] { decode(tokens, 0, true); });
  }
  /// One decode step after what the context holds.
  Times step(llama_token token) {
    return timed([&] { decode({token}, position_++, true); });
  }

  std::int64_t passes() const {
#if defined(MOESTAT_HAS_CUDA)
    if (cuda_) return cuda_->passes;
#endif
    return llama_recorder_ ? llama_recorder_->num_passes() : 0;
  }

 private:
  void decode(const std::vector<llama_token>& tokens, int first_position, bool last_output) {
    llama_batch batch = llama_batch_init(int(tokens.size()), 0, 1);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      batch.token[i] = tokens[i];
      batch.pos[i] = first_position + int(i);
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = last_output || i + 1 == tokens.size();
    }
    batch.n_tokens = int(tokens.size());
#if defined(MOESTAT_HAS_CUDA)
    if (cuda_) cuda_->recorder->begin_pass(cuda_->passes);
#endif
    const int result = llama_decode(context_, batch);
    llama_batch_free(batch);
    if (llama_recorder_) llama_recorder_->end_pass();
#if defined(MOESTAT_HAS_CUDA)
    if (cuda_) {
      cuda_->recorder->end_pass();
      ++cuda_->passes;
    }
#endif
    if (result != 0) throw std::runtime_error(fmt::format("llama_decode: {}", result));
    // The outputs are read, as a sampler would (and to wait for the device).
    (void)llama_get_logits_ith(context_, -1);
  }

  template <typename Body>
  static Times timed(Body&& body) {
    const auto start = Clock::now();
    const double start_cpu = cpu_seconds();
    body();
    return {std::chrono::duration<double>(Clock::now() - start).count(), cpu_seconds() - start_cpu};
  }

  int position_ = 0;
  std::unique_ptr<moestat::record::CpuRecorder> recorder_;
  std::unique_ptr<moestat::llama_cpp::LlamaRecorder> llama_recorder_;
#if defined(MOESTAT_HAS_CUDA)
  std::unique_ptr<CudaCounting> cuda_;
#endif
  llama_context* context_ = nullptr;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options options = parse(argc, argv);
  llama_log_set(quiet, nullptr);
  llama_backend_init();
  llama_model_params model_params = llama_model_default_params();
  model_params.n_gpu_layers = options.gpu_layers;
  std::unique_ptr<llama_model, decltype(&llama_model_free)> model(
      llama_model_load_from_file(options.model.c_str(), model_params), &llama_model_free);
  if (!model) throw std::runtime_error("llama.cpp could not load " + options.model);
  const moestat::ModelTopology topology = moestat::llama_cpp::model_topology(*model);
  std::array<char, 256> description{};
  llama_model_desc(model.get(), description.data(), description.size());
  fmt::print("model: {} ({}), {} MoE layers of {} experts, top-{}; threads {}, gpu layers {}\n",
             options.model, description.data(), topology.num_moe_layers(),
             topology.num_logical_experts, topology.top_k,
             options.threads > 0 ? std::to_string(options.threads) : "default", options.gpu_layers);

  const int vocabulary = llama_vocab_n_tokens(llama_model_get_vocab(model.get()));
  std::mt19937 random(7);
  std::uniform_int_distribution<int> token(3, vocabulary - 1);  // no <unk>, <s>, </s>
  std::vector<llama_token> prompt(std::size_t(options.prompt_tokens));
  std::vector<llama_token> steps(std::size_t(options.decode_tokens));
  for (auto& id : prompt) id = token(random);
  for (auto& id : steps) id = token(random);

  std::vector<std::unique_ptr<Runner>> runners;
  std::vector<Mode> modes;
  for (Mode mode : kModes) {
    // CudaRecorder counts device memory: a CUDA build with the layers on the GPU only.
#if defined(MOESTAT_HAS_CUDA)
    if (mode == Mode::kCudaRecorder && options.gpu_layers == 0) continue;
#else
    if (mode == Mode::kCudaRecorder) continue;
#endif
    modes.push_back(mode);
    runners.push_back(std::make_unique<Runner>(*model, options, mode));
  }
  // A warm-up round, not timed (page cache, thread pools, allocations).
  for (auto& runner : runners) {
    runner->prompt(prompt);
    runner->step(steps[0]);
  }

  // The modes take turns at every prompt pass and at every decode step, each round in
  // another order, and each mode's time is compared with `off`'s of the same round: drift
  // and bursts of other load on a shared machine fall on a round, not on a mode. Per mode:
  // the median over rounds of its tokens/s, and of its ratio to `off`'s in the round.
  const std::size_t num_modes = runners.size();
  // [phase: prompt, decode][clock: wall, cpu][mode] -> samples
  std::vector<double> rate[2][2][8], ratio[2][2][8];
  auto add_round = [&](int phase, const std::vector<Runner::Times>& times, double tokens) {
    for (std::size_t m = 0; m < num_modes; ++m) {
      for (int clock = 0; clock < 2; ++clock) {
        const double mine = clock == 0 ? times[m].wall : times[m].cpu;
        const double off = clock == 0 ? times[0].wall : times[0].cpu;
        rate[phase][clock][m].push_back(tokens / mine);
        ratio[phase][clock][m].push_back(off / mine);
      }
    }
  };
  int round = 0;
  for (int repeat = 0; repeat < options.repeats; ++repeat) {
    std::vector<Runner::Times> times(num_modes);
    for (std::size_t i = 0; i < num_modes; ++i) {
      const std::size_t m = (i + std::size_t(round)) % num_modes;
      times[m] = runners[m]->prompt(prompt);
    }
    ++round;
    add_round(0, times, double(prompt.size()));
    for (const llama_token next : steps) {
      for (std::size_t i = 0; i < num_modes; ++i) {
        const std::size_t m = (i + std::size_t(round)) % num_modes;
        times[m] = runners[m]->step(next);
      }
      ++round;
      add_round(1, times, 1.0);
    }
    if (std::getenv("MOESTAT_BENCH_VERBOSE") != nullptr) {
      std::fprintf(stderr, "repeat %d done\n", repeat);
    }
  }
  fmt::print(
      "{} repeats of a {}-token prompt pass and {} decode steps; modes in turn at every pass "
      "and step; medians over {} prompt rounds and {} decode rounds\n",
      options.repeats, options.prompt_tokens, options.decode_tokens, options.repeats,
      options.repeats * options.decode_tokens);
  for (int clock = 0; clock < 2; ++clock) {
    fmt::print("{:<10} {:>14} {:>10} {:>14} {:>10} {:>8}   ({})\n", "mode", "prompt tok/s",
               "vs off", "decode tok/s", "vs off", "passes",
               clock == 0 ? "wall time" : "CPU time of every thread");
    for (std::size_t m = 0; m < num_modes; ++m) {
      fmt::print("{:<10} {:>14.1f} {:>10.4f} {:>14.2f} {:>10.4f} {:>8}\n", mode_name(modes[m]),
                 median(rate[0][clock][m]), median(ratio[0][clock][m]), median(rate[1][clock][m]),
                 median(ratio[1][clock][m]), runners[m]->passes());
    }
  }
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "moestat_bench_llama: %s\n", error.what());
  return 1;
}
