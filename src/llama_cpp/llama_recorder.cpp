#include <fmt/format.h>
#include <ggml-backend.h>
#include <ggml.h>
#include <llama.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <moestat/error.hpp>
#include <moestat/llama_cpp/llama_recorder.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace moestat::llama_cpp {
namespace {

// NOTE: exactly this prefix and a layer number: deepseek2's `ffn_moe_group_topk-<il>` (group
// ids) and the `ffn_moe_topk-<il> (view)` names ggml gives views of it are other tensors.
constexpr std::string_view kTopkPrefix = "ffn_moe_topk-";

/// The layer of a `ffn_moe_topk-<layer>` tensor name, or -1 for any other name.
std::int64_t topk_layer(const char* name) {
  const std::string_view view(name);
  if (!view.starts_with(kTopkPrefix)) return -1;
  const std::string_view digits = view.substr(kTopkPrefix.size());
  std::int64_t layer = -1;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), layer);
  if (error != std::errc() || end != digits.data() + digits.size()) return -1;
  return layer;
}

/// An integer of the model's GGUF metadata, if the key is there.
std::optional<std::int64_t> meta_int(const llama_model& model, const std::string& key) {
  std::array<char, 64> value{};
  if (llama_model_meta_val_str(&model, key.c_str(), value.data(), value.size()) < 0) {
    return std::nullopt;
  }
  std::int64_t number = 0;
  const char* end = value.data() + std::strlen(value.data());
  const auto [last, error] = std::from_chars(value.data(), end, number);
  MOESTAT_CHECK(error == std::errc() && last == end,
                "llama.cpp model metadata {} is \"{}\", not an integer", key, value.data());
  return number;
}

}  // namespace

ModelTopology model_topology(const llama_model& model) {
  std::array<char, 128> arch{};
  MOESTAT_CHECK(
      llama_model_meta_val_str(&model, "general.architecture", arch.data(), arch.size()) >= 0,
      "llama.cpp model without general.architecture");
  const std::string prefix = std::string(arch.data()) + ".";
  const std::int64_t num_experts = meta_int(model, prefix + "expert_count").value_or(0);
  MOESTAT_CHECK(num_experts > 0,
                "llama.cpp model of architecture {} has no experts ({}expert_count)", arch.data(),
                prefix);
  ModelTopology topology =
      ModelTopology::uniform(llama_model_n_layer(&model), num_experts,
                             meta_int(model, prefix + "expert_used_count").value_or(1));
  const std::int64_t num_dense = meta_int(model, prefix + "leading_dense_block_count").value_or(0);
  for (std::int64_t layer = 0; layer < std::min(num_dense, topology.num_layers); ++layer) {
    topology.moe_layers[std::size_t(layer)] = false;
  }
  topology.num_groups = meta_int(model, prefix + "expert_group_count").value_or(1);
  topology.validate();
  return topology;
}

LlamaRecorder::LlamaRecorder(Recorder& recorder) : recorder_(recorder) {}

void LlamaRecorder::attach(llama_context_params& params) {
  MOESTAT_CHECK(!attached_, "LlamaRecorder::attach: already attached to a context's parameters");
  MOESTAT_CHECK(params.cb_eval != &LlamaRecorder::eval_callback,
                "LlamaRecorder::attach: the parameters already hold a LlamaRecorder's callback");
  previous_ = params.cb_eval;
  previous_user_data_ = params.cb_eval_user_data;
  params.cb_eval = &LlamaRecorder::eval_callback;
  params.cb_eval_user_data = this;
  attached_ = true;
}

void LlamaRecorder::stop() {
  close_pass();
  recording_ = false;
  check();
}

void LlamaRecorder::end_pass() {
  close_pass();
  check();
}

void LlamaRecorder::check() {
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

bool LlamaRecorder::eval_callback(ggml_tensor* tensor, bool ask, void* user_data) {
  return static_cast<LlamaRecorder*>(user_data)->on_eval(tensor, ask);
}

bool LlamaRecorder::on_eval(ggml_tensor* tensor, bool ask) {
  if (ask) {
    previous_wants_ = previous_ != nullptr && previous_(tensor, true, previous_user_data_);
    // After an error, nothing more until check() reports it: the pass it broke is gone.
    wanted_layer_ = recording_ && !error_ ? topk_layer(tensor->name) : -1;
    return previous_wants_ || wanted_layer_ >= 0;
  }
  // The data of the node last asked about (the scheduler asks again for every node).
  bool keep_going = true;
  if (wanted_layer_ >= 0) {
    try {
      record(*tensor, wanted_layer_);
    } catch (...) {
      // NOTE: an exception must not unwind through llama.cpp; false stops the graph split.
      if (!error_) error_ = std::current_exception();
      if (pass_open_) recorder_.abort_pass();
      pass_open_ = false;
      keep_going = false;
    }
  }
  if (previous_wants_) keep_going = previous_(tensor, false, previous_user_data_) && keep_going;
  return keep_going;
}

void LlamaRecorder::record(const ggml_tensor& tensor, std::int64_t layer) {
  MOESTAT_CHECK(tensor.type == GGML_TYPE_I32 && tensor.ne[2] == 1 && tensor.ne[3] == 1,
                "llama.cpp tensor {} is not an I32 matrix [n_expert_used, n_tokens]", tensor.name);
  const std::int64_t rows = tensor.ne[1];
  // A new micro-batch starts at a layer at or below the last one recorded.
  if (pass_open_ && layer <= last_layer_) close_pass();
  if (!pass_open_) {
    recorder_.begin_pass(num_passes_);
    pass_open_ = true;
    pass_tokens_ = rows;
  }
  last_layer_ = layer;
  MOESTAT_CHECK(rows == pass_tokens_ || recorder_.options().mode != RecordMode::kPerToken,
                "llama.cpp layer {} routed {} of the micro-batch's {} tokens (only those that "
                "request output): per-token traces need every token to request output",
                layer, rows, pass_tokens_);
  if (rows == 0) return;  // a last layer without output tokens

  const void* data = tensor.data;
  if (tensor.buffer != nullptr && !ggml_backend_buffer_is_host(tensor.buffer)) {
    // Device memory (CUDA): the view's bytes, strides included, copied to the host.
    staging_.resize(ggml_nbytes(&tensor));
    ggml_backend_tensor_get(const_cast<ggml_tensor*>(&tensor), staging_.data(), 0, staging_.size());
    data = staging_.data();
  }
  constexpr auto kIdBytes = std::int64_t(sizeof(std::int32_t));
  const std::array<std::int64_t, 2> shape{rows, tensor.ne[0]};
  const std::array<std::int64_t, 2> strides{std::int64_t(tensor.nb[1]) / kIdBytes,
                                            std::int64_t(tensor.nb[0]) / kIdBytes};
  recorder_.record_topk(layer, TensorView(data, DType::kInt32, shape, strides));
}

void LlamaRecorder::close_pass() {
  if (!pass_open_) return;
  pass_open_ = false;
  last_layer_ = -1;
  recorder_.end_pass();
  ++num_passes_;
}

}  // namespace moestat::llama_cpp
