// LlamaRecorder on llama.cpp's GPU backend (run_device_llama.sh builds and runs it on a GPU
// machine; the CPU backend is tested by llama_recorder_test.cpp): the ids are in device memory
// there, and the recorder copies them to the host. The reference is independent of the
// recorded ids, as on the CPU: a callback chained before the recorder's copies each layer's
// router probabilities (`ffn_moe_probs-<il>`) to the host and takes their top-k.
//
//   moestat_llama_device_check MODEL.gguf [--gpu-layers N]   (99 by default; 0: the CPU)
//
// Checks, for a prompt of several micro-batches and decode steps after a warm-up: counts
// (stat) equal the reference's tally; per-token traces equal its rows; every layer counted
// every token k times. Prints what it checked and exits 1 on any difference.
#include <fmt/format.h>
#include <ggml-backend.h>
#include <llama.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <moestat/llama_cpp/llama_recorder.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  fmt::print("{} {}\n", ok ? "ok:  " : "FAIL:", what);
  failures += !ok;
}

struct ProbsTopk {
  bool on = false;
  std::int64_t top_k = 0;
  std::vector<std::vector<std::vector<int>>> rows;
  std::int64_t device_tensors = 0;  ///< Probabilities found in device memory.

  static bool callback(ggml_tensor* tensor, bool ask, void* user_data) {
    auto& self = *static_cast<ProbsTopk*>(user_data);
    const std::string_view name(tensor->name);
    const std::string_view prefix = "ffn_moe_probs-";
    const bool wanted =
        self.on && name.starts_with(prefix) &&
        name.find_first_not_of("0123456789", prefix.size()) == std::string_view::npos;
    if (ask) return wanted;
    const std::size_t layer = std::stoul(std::string(name.substr(prefix.size())));
    if (self.rows.size() <= layer) self.rows.resize(layer + 1);
    std::vector<char> bytes(ggml_nbytes(tensor));
    const bool host = tensor->buffer == nullptr || ggml_backend_buffer_is_host(tensor->buffer);
    self.device_tensors += !host;
    ggml_backend_tensor_get(tensor, bytes.data(), 0, bytes.size());
    for (std::int64_t row = 0; row < tensor->ne[1]; ++row) {
      const auto* probs = reinterpret_cast<const float*>(bytes.data() + row * tensor->nb[1]);
      std::vector<int> ids(std::size_t(tensor->ne[0]));
      std::iota(ids.begin(), ids.end(), 0);
      std::partial_sort(ids.begin(), ids.begin() + self.top_k, ids.end(),
                        [&](int a, int b) { return probs[a] > probs[b]; });
      ids.resize(std::size_t(self.top_k));
      std::sort(ids.begin(), ids.end());
      self.rows[layer].push_back(ids);
    }
    return true;
  }
};

class Llama {
 public:
  Llama(llama_model& model, moestat::llama_cpp::LlamaRecorder& recorder, ProbsTopk& probe)
      : model_(model) {
    llama_context_params params = llama_context_default_params();
    params.n_ctx = 512;
    params.n_batch = 256;
    params.n_ubatch = 16;
    params.cb_eval = &ProbsTopk::callback;
    params.cb_eval_user_data = &probe;
    recorder.attach(params);
    context_ = llama_init_from_model(&model, params);
    if (context_ == nullptr) throw std::runtime_error("llama.cpp could not make a context");
  }
  ~Llama() { llama_free(context_); }
  Llama(const Llama&) = delete;
  Llama& operator=(const Llama&) = delete;

  void decode(const std::vector<llama_token>& tokens, int first) {
    llama_batch batch = llama_batch_init(int(tokens.size()), 0, 1);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      batch.token[i] = tokens[i];
      batch.pos[i] = first + int(i);
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = 1;
    }
    batch.n_tokens = int(tokens.size());
    const int result = llama_decode(context_, batch);
    llama_batch_free(batch);
    if (result != 0) throw std::runtime_error(fmt::format("llama_decode: {}", result));
  }
  void clear() { llama_memory_clear(llama_get_memory(context_), true); }

 private:
  llama_model& model_;
  llama_context* context_ = nullptr;
};

void quiet(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2)
    throw std::runtime_error("usage: moestat_llama_device_check MODEL.gguf [--gpu-layers N]");
  int gpu_layers = 99;
  if (argc >= 4 && std::string_view(argv[2]) == "--gpu-layers") gpu_layers = std::atoi(argv[3]);
  llama_log_set(quiet, nullptr);
  llama_backend_init();
  llama_model_params model_params = llama_model_default_params();
  model_params.n_gpu_layers = gpu_layers;
  llama_model* model = llama_model_load_from_file(argv[1], model_params);
  if (model == nullptr) throw std::runtime_error(std::string("cannot load ") + argv[1]);
  const moestat::ModelTopology topology = moestat::llama_cpp::model_topology(*model);
  for (std::size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    fmt::print("backend device: {} ({})\n", ggml_backend_dev_name(ggml_backend_dev_get(i)),
               ggml_backend_dev_description(ggml_backend_dev_get(i)));
  }
  std::vector<llama_token> prompt(40);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = llama_token(3 + (i * 37) % 250);

  for (const auto mode : {moestat::RecordMode::kStat, moestat::RecordMode::kPerToken}) {
    const bool per_token = mode == moestat::RecordMode::kPerToken;
    moestat::record::CpuRecorder recorder(topology, {.mode = mode, .window_size = -1});
    moestat::llama_cpp::LlamaRecorder llama_recorder(recorder);
    ProbsTopk probe{.top_k = topology.top_k};
    Llama llama(*model, llama_recorder, probe);
    llama.decode({1, 2}, 0);  // the warm-up common_init_from_params makes: not recorded
    llama.clear();
    recorder.start();
    llama_recorder.start();
    probe.on = true;
    llama.decode(prompt, 0);
    llama_recorder.end_pass();
    const int steps = per_token ? 0 : 4;
    for (int step = 0; step < steps; ++step) {
      llama.decode({llama_token(5 + step)}, int(prompt.size()) + step);
      llama_recorder.end_pass();
    }
    const moestat::Snapshot snapshot = recorder.snapshot();
    const std::int64_t num_layers = topology.num_layers, num_experts = topology.num_logical_experts;
    const std::int64_t tokens = std::int64_t(prompt.size()) + steps;
    const std::string label = per_token ? "per_token" : "stat";
    if (gpu_layers > 0) {
      expect(probe.device_tensors > 0,
             fmt::format("{}: the router probabilities were in device memory ({} tensors)", label,
                         probe.device_tensors));
    }
    if (!per_token) {
      std::vector<std::int64_t> want(std::size_t(num_layers * num_experts), 0);
      for (std::size_t layer = 0; layer < probe.rows.size(); ++layer) {
        for (const auto& ids : probe.rows[layer]) {
          for (int id : ids) ++want[layer * std::size_t(num_experts) + std::size_t(id)];
        }
      }
      expect(snapshot.logical_totals() == want,
             "stat: counts equal the routers' top-k tallied on the host");
      const auto totals = snapshot.logical_totals();
      bool every_token = true;
      for (std::int64_t layer = 0; layer < num_layers; ++layer) {
        every_token &= std::accumulate(totals.begin() + layer * num_experts,
                                       totals.begin() + (layer + 1) * num_experts,
                                       std::int64_t(0)) == tokens * topology.top_k;
      }
      expect(every_token, fmt::format("stat: every layer counted {} tokens x top-{} (no warm-up)",
                                      tokens, topology.top_k));
    } else {
      bool equal = snapshot.num_tokens() == tokens;
      for (std::int64_t layer = 0; equal && layer < num_layers; ++layer) {
        for (std::int64_t token = 0; equal && token < tokens; ++token) {
          std::vector<int> ids(std::size_t(topology.top_k));
          for (std::int64_t k = 0; k < topology.top_k; ++k) {
            ids[std::size_t(k)] = snapshot.token_logical_ids[std::size_t(
                (token * num_layers + layer) * topology.top_k + k)];
          }
          std::sort(ids.begin(), ids.end());
          equal = ids == probe.rows[std::size_t(layer)][std::size_t(token)];
        }
      }
      expect(equal, fmt::format("per_token: {} tokens' ids equal the routers' top-k", tokens));
    }
  }
  llama_model_free(model);
  fmt::print("{}\n", failures == 0 ? "device check passed" : "device check FAILED");
  return failures == 0 ? 0 : 1;
} catch (const std::exception& error) {
  std::fprintf(stderr, "moestat_llama_device_check: %s\n", error.what());
  return 1;
}
