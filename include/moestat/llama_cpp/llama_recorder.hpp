// Records the expert routing of a model that llama.cpp runs, from inside llama.cpp: the
// component moestat::llama_cpp (find_package(moestat COMPONENTS llama_cpp)), built when
// llama.cpp is found (docs/llama-cpp.md). llama.cpp's own types are only declared here, so
// this header needs none of llama.cpp's; the program that attaches the recorder includes
// llama.h itself.
#pragma once

#include <cstdint>
#include <exception>
#include <moestat/recorder.hpp>
#include <moestat/topology.hpp>
#include <vector>

struct ggml_tensor;
struct llama_context_params;
struct llama_model;

namespace moestat::llama_cpp {

/// The topology of a loaded llama.cpp model, from its GGUF metadata: `<arch>.block_count`
/// decoder layers, of which the first `<arch>.leading_dense_block_count` (DeepSeek) are dense
/// and the others MoE; `<arch>.expert_count` experts (P = E, one rank), `<arch>.expert_used_count`
/// per token, `<arch>.expert_group_count` groups. moestat::Error for a model without experts.
ModelTopology model_topology(const llama_model& model);

/// Feeds a moestat Recorder from llama.cpp's eval callback (`llama_context_params.cb_eval`).
///
/// llama.cpp names each MoE layer's selected experts `ffn_moe_topk-<layer>`: an I32 view
/// [n_expert_used, n_tokens] (ggml order; rows of top-k ids, `nb[1]` apart). While recording,
/// the callback asks for exactly those nodes and hands each to `Recorder::record_topk` with the
/// layer of its name. Every node the callback asks for costs a synchronisation of llama.cpp's
/// scheduler (one per MoE layer per micro-batch); while not recording it asks for none, so it
/// costs a name comparison per graph node.
///
/// Passes: one per llama.cpp micro-batch (ubatch). A pass opens at the micro-batch's first MoE
/// layer and closes when a layer at or below the last one arrives (the next micro-batch), or
/// at `end_pass()`, which a caller calls once llama_decode returns.
///
/// Warm-up: llama.cpp's warm-up decode (`common_init_from_params`) routes like any other and
/// cannot be told apart by its tensors, so nothing is recorded until `start()`: call it after
/// the warm-up. (After `llama_set_warmup`, llama.cpp may reuse an all-experts graph for a decode
/// of the same shape; LLAMA_GRAPH_REUSE_DISABLE=1 prevents that.)
///
/// Rows: llama.cpp's last layer routes only the tokens that request output (`batch.logits`),
/// and a micro-batch without one gives it 0 rows (nothing is recorded). Counts record what was
/// routed. Per-token traces need every token of a pass in every layer: in the per_token mode a
/// layer with fewer rows than the pass's first MoE layer is an error (request output for every
/// token, as `moestat llama-record` does).
///
/// Errors met inside the callback cannot cross llama.cpp: the pass is dropped, the callback
/// returns false, which stops the computation of that graph split (llama.cpp 0.3.36 still
/// reports success: llama_decode's result does not say so, and its outputs are not to be used),
/// nothing more is recorded, and `check()` (also called by end_pass and stop) rethrows the
/// error.
///
/// Backends: the ids are read in place from host memory (the CPU backend); from a device buffer
/// (CUDA) they are copied to the host with ggml_backend_tensor_get first: correct, but not yet
/// measured on a GPU (docs/llama-cpp.md).
///
/// @code
///   moestat::record::CpuRecorder recorder(moestat::llama_cpp::model_topology(*model));
///   moestat::llama_cpp::LlamaRecorder llama_recorder(recorder);
///   llama_context_params params = llama_context_default_params();
///   llama_recorder.attach(params);  // chains to a cb_eval already set in params
///   llama_context* ctx = llama_init_from_model(model, params);
///   // ... warm-up decode ...
///   recorder.start();
///   llama_recorder.start();
///   llama_decode(ctx, batch);
///   llama_recorder.end_pass();
///   moestat::Snapshot snapshot = recorder.snapshot();
/// @endcode
///
/// Not thread-safe: one LlamaRecorder per llama_context, driven by the thread that decodes.
class LlamaRecorder {
 public:
  /// `recorder` must outlive this object and have the model's topology (model_topology).
  explicit LlamaRecorder(Recorder& recorder);
  LlamaRecorder(const LlamaRecorder&) = delete;
  LlamaRecorder& operator=(const LlamaRecorder&) = delete;

  /// Points `params.cb_eval` / `cb_eval_user_data` at this recorder. A callback already set there
  /// keeps being called first, for every node, with its own user data: the nodes it asks for are
  /// asked for, and its answer for them (false stops the graph) is kept. Once per recorder;
  /// moestat::Error if `params` already hold a LlamaRecorder's callback (parameters reused from
  /// another context would feed both recorders).
  void attach(llama_context_params& params);

  /// Records the micro-batches computed from now on (the warm-up must be over).
  void start() noexcept { recording_ = true; }
  /// Ends the open pass and records nothing more until start().
  void stop();
  bool is_recording() const noexcept { return recording_; }

  /// Closes the open pass (call when llama_decode returns), then check().
  void end_pass();
  /// Rethrows the first error the callback met since the last check, if any.
  void check();

  /// Passes this object has closed since it was made.
  std::int64_t num_passes() const noexcept { return num_passes_; }

  /// The callback itself (`ggml_backend_sched_eval_callback`), `user_data` this object.
  static bool eval_callback(ggml_tensor* tensor, bool ask, void* user_data);

 private:
  using Callback = bool (*)(ggml_tensor*, bool, void*);

  bool on_eval(ggml_tensor* tensor, bool ask);
  void record(const ggml_tensor& tensor, std::int64_t layer);
  void close_pass();

  Recorder& recorder_;
  Callback previous_ = nullptr;
  void* previous_user_data_ = nullptr;
  bool attached_ = false;
  bool recording_ = false;
  /// What the previous callback answered when last asked: the scheduler asks about a node and
  /// then, if anyone wanted it, passes its data before asking about the next.
  bool previous_wants_ = false;
  /// Our layer of the node last asked about, -1 if we did not want it.
  std::int64_t wanted_layer_ = -1;
  bool pass_open_ = false;
  std::int64_t last_layer_ = -1;
  std::int64_t pass_tokens_ = 0;  ///< Rows of the open pass's first MoE layer.
  std::int64_t num_passes_ = 0;
  std::vector<std::uint8_t> staging_;  ///< Host copy of ids held in device memory.
  std::exception_ptr error_;
};

}  // namespace moestat::llama_cpp
