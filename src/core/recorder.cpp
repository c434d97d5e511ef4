#include <algorithm>
#include <limits>
#include <moestat/error.hpp>
#include <moestat/recorder.hpp>

namespace moestat {
namespace {

/// The fewest rows of any layer's ids: a valid-token count may not exceed it.
std::int64_t fewest_rows(std::span<const Recorder::LayerTopk> layers) {
  std::int64_t rows = std::numeric_limits<std::int64_t>::max();
  for (const Recorder::LayerTopk& entry : layers) rows = std::min(rows, entry.topk_ids.size(0));
  return rows;
}

}  // namespace

std::string_view record_mode_name(RecordMode mode) noexcept {
  switch (mode) {
    case RecordMode::kStat:
      return "stat";
    case RecordMode::kStatApprox:
      return "stat_approx";
    case RecordMode::kPerPass:
      return "per_pass";
    case RecordMode::kPerToken:
      return "per_token";
    case RecordMode::kDecayed:
      return "decayed";
  }
  return "unknown";
}

RecordMode parse_record_mode(std::string_view name) {
  for (RecordMode mode : {RecordMode::kStat, RecordMode::kStatApprox, RecordMode::kPerPass,
                          RecordMode::kPerToken, RecordMode::kDecayed}) {
    if (record_mode_name(mode) == name) return mode;
  }
  MOESTAT_FAIL(
      "unknown recording mode '{}'; expected stat, stat_approx, per_pass, per_token or decayed",
      name);
}

void RecorderOptions::validate() const {
  MOESTAT_CHECK(window_size == -1 || window_size > 0,
                "recorder options: window_size must be positive or -1 (unbounded), got {}",
                window_size);
  MOESTAT_CHECK(decay >= 0.0 && decay <= 1.0, "recorder options: decay must be in [0, 1], got {}",
                decay);
  MOESTAT_CHECK(per_token_capacity > 0,
                "recorder options: per_token_capacity must be positive, got {}",
                per_token_capacity);
}

Recorder::Recorder(ModelTopology topology, RecorderOptions options)
    : topology_(std::move(topology)), options_(options) {
  topology_.validate();
  options_.validate();
}

void Recorder::begin_pass(std::int64_t pass_id) {
  std::lock_guard hooks(hook_mutex_);
  if (disabled_depth_ > 0) return;
  MOESTAT_CHECK(!pass_open_, "begin_pass({}) while a pass is open: call end_pass first", pass_id);
  pass_open_ = true;
  do_begin_pass(pass_id);
}

void Recorder::end_pass() {
  std::lock_guard hooks(hook_mutex_);
  if (disabled_depth_ > 0) return;
  MOESTAT_CHECK(pass_open_, "end_pass without begin_pass");
  pass_open_ = false;
  do_end_pass();
}

void Recorder::abort_pass() {
  std::lock_guard hooks(hook_mutex_);
  if (disabled_depth_ > 0) return;
  MOESTAT_CHECK(pass_open_, "abort_pass without begin_pass");
  pass_open_ = false;
  do_abort_pass();
}

void Recorder::check_hook_layer(std::int64_t layer, const char* hook) const {
  MOESTAT_CHECK(layer != kNoLayer, "{} with no layer: pass a layer index or open a LayerScope",
                hook);
  MOESTAT_CHECK(layer >= 0 && layer < topology_.num_layers, "{}: layer {} out of range [0, {})",
                hook, layer, topology_.num_layers);
  MOESTAT_CHECK(topology_.is_moe(layer), "{}: layer {} is a dense layer in the topology", hook,
                layer);
  MOESTAT_CHECK(pass_open_ || accepts_hooks_outside_pass(),
                "{} outside a pass: call begin_pass first", hook);
}

void Recorder::check_topk_ids(const TensorView& topk_ids) const {
  MOESTAT_CHECK(options_.mode != RecordMode::kStatApprox,
                "record_topk in stat_approx mode: that mode records DeepEP normal-dispatch counts "
                "through record_local_counts");
  topk_ids.require_dims(2, "topk_ids");
  topk_ids.require_integer("topk_ids");
  MOESTAT_CHECK(options_.mode != RecordMode::kPerToken || topk_ids.size(1) == topology_.top_k,
                "per_token mode needs topk_ids with top_k = {} columns, got {} (slice off fused "
                "shared-expert columns)",
                topology_.top_k, topk_ids.size(1));
}

void Recorder::record_topk(std::int64_t layer, const TensorView& topk_ids,
                           std::int64_t num_valid_tokens) {
  std::lock_guard hooks(hook_mutex_);
  if (disabled_depth_ > 0) return;
  check_hook_layer(layer, "record_topk");
  check_topk_ids(topk_ids);
  MOESTAT_CHECK(num_valid_tokens >= kAllTokens && num_valid_tokens <= topk_ids.size(0),
                "record_topk: num_valid_tokens {} outside [0, {}] (the rows of topk_ids; -1 = all)",
                num_valid_tokens, topk_ids.size(0));
  do_record_topk(layer, topk_ids,
                 num_valid_tokens == kAllTokens ? topk_ids.size(0) : num_valid_tokens);
}

void Recorder::record_topk(std::int64_t layer, const TensorView& topk_ids,
                           const TensorView& num_valid_tokens) {
  std::lock_guard hooks(hook_mutex_);
  if (disabled_depth_ > 0) return;
  check_hook_layer(layer, "record_topk");
  check_topk_ids(topk_ids);
  num_valid_tokens.require_integer("num_valid_tokens");
  MOESTAT_CHECK(num_valid_tokens.numel() == 1, "num_valid_tokens must hold one element, got {}",
                num_valid_tokens.numel());
  if (num_valid_tokens.device().kind == DeviceKind::kCpu) {
    do_record_topk(layer, topk_ids,
                   host_valid_count(num_valid_tokens, topk_ids.size(0), "record_topk"));
    return;
  }
  do_record_topk(layer, topk_ids, num_valid_tokens);
}

std::int64_t Recorder::host_valid_count(const TensorView& num_valid_tokens, std::int64_t rows,
                                        const char* hook) {
  // A host count is read now, the same way for every backend. The one element sits at
  // offset 0 whatever the shape ([], [1], [1, 1], ...); a 0-d view of it reads it with the
  // usual null and dtype checks.
  const TensorView element(num_valid_tokens.data(), num_valid_tokens.dtype(), {}, {});
  const std::int64_t count = element.int_at({});
  MOESTAT_CHECK(count >= 0 && count <= rows,
                "{}: num_valid_tokens {} outside [0, {}] (the rows of topk_ids)", hook, count,
                rows);
  return count;
}

void Recorder::check_topk_layers(std::span<const LayerTopk> layers) const {
  for (const LayerTopk& entry : layers) {
    check_hook_layer(entry.layer, "record_topk_layers");
    check_topk_ids(entry.topk_ids);
  }
}

void Recorder::record_topk_layers(std::span<const LayerTopk> layers,
                                  std::int64_t num_valid_tokens) {
  std::lock_guard hooks(hook_mutex_);
  if (disabled_depth_ > 0 || layers.empty()) return;
  check_topk_layers(layers);
  const std::int64_t rows = fewest_rows(layers);
  MOESTAT_CHECK(num_valid_tokens >= kAllTokens && num_valid_tokens <= rows,
                "record_topk_layers: num_valid_tokens {} outside [0, {}] (the fewest rows of the "
                "layers' topk_ids; -1 = all)",
                num_valid_tokens, rows);
  do_record_topk_layers(layers, num_valid_tokens);
}

void Recorder::record_topk_layers(std::span<const LayerTopk> layers,
                                  const TensorView& num_valid_tokens) {
  std::lock_guard hooks(hook_mutex_);
  if (disabled_depth_ > 0 || layers.empty()) return;
  check_topk_layers(layers);
  num_valid_tokens.require_integer("num_valid_tokens");
  MOESTAT_CHECK(num_valid_tokens.numel() == 1, "num_valid_tokens must hold one element, got {}",
                num_valid_tokens.numel());
  if (num_valid_tokens.device().kind == DeviceKind::kCpu) {
    do_record_topk_layers(
        layers, host_valid_count(num_valid_tokens, fewest_rows(layers), "record_topk_layers"));
    return;
  }
  do_record_topk_layers(layers, num_valid_tokens);
}

void Recorder::do_record_topk_layers(std::span<const LayerTopk> layers,
                                     std::int64_t num_valid_tokens) {
  for (const LayerTopk& entry : layers) {
    do_record_topk(entry.layer, entry.topk_ids,
                   num_valid_tokens == kAllTokens ? entry.topk_ids.size(0) : num_valid_tokens);
  }
}

void Recorder::do_record_topk_layers(std::span<const LayerTopk> layers,
                                     const TensorView& num_valid_tokens) {
  for (const LayerTopk& entry : layers)
    do_record_topk(entry.layer, entry.topk_ids, num_valid_tokens);
}

void Recorder::record_topk(const TensorView& topk_ids, std::int64_t num_valid_tokens) {
  record_topk(scope_layer_.load(std::memory_order_relaxed), topk_ids, num_valid_tokens);
}

void Recorder::record_local_counts(std::int64_t layer, const TensorView& counts,
                                   std::int64_t rank) {
  std::lock_guard hooks(hook_mutex_);
  if (disabled_depth_ > 0) return;
  check_hook_layer(layer, "record_local_counts");
  MOESTAT_CHECK(options_.mode != RecordMode::kPerToken,
                "record_local_counts in per_token mode: local counts carry no per-token ids");
  counts.require_dims(1, "local counts");
  counts.require_integer("local counts");
  const std::int64_t expected = topology_.num_local_experts() + topology_.num_shared_expert_slots;
  MOESTAT_CHECK(counts.size(0) == expected,
                "local counts have {} entries, expected {} local experts + {} shared-expert slots",
                counts.size(0), topology_.num_local_experts(), topology_.num_shared_expert_slots);
  MOESTAT_CHECK(rank >= 0 && rank < topology_.ep_size, "local counts: rank {} out of range [0, {})",
                rank, topology_.ep_size);
  do_record_local_counts(layer, counts, rank * topology_.num_local_experts());
}

void Recorder::record_local_counts(const TensorView& counts, std::int64_t rank) {
  record_local_counts(scope_layer_.load(std::memory_order_relaxed), counts, rank);
}

LayerScope Recorder::layer_scope(std::int64_t layer) { return LayerScope(*this, layer); }

DisabledRegion Recorder::disabled_region() { return DisabledRegion(*this); }

GpuLoadsSince Recorder::gpu_loads_since(std::uint64_t generation, std::int64_t first_arrival,
                                        std::int64_t num_gpus) const {
  const RecordMode mode = options_.mode;
  MOESTAT_CHECK(
      mode == RecordMode::kStat || mode == RecordMode::kStatApprox || mode == RecordMode::kPerPass,
      "gpu_loads_since needs a recorder that keeps passes (stat, stat_approx or "
      "per_pass), not {}",
      record_mode_name(mode));
  try {
    slots_per_gpu(topology_.num_physical_experts, num_gpus);
  } catch (const Error& error) {
    throw error.with_context("gpu_loads_since");
  }
  return do_gpu_loads_since(generation, first_arrival, num_gpus);
}

GpuLoadsSince Recorder::do_gpu_loads_since(std::uint64_t generation, std::int64_t first_arrival,
                                           std::int64_t num_gpus) const {
  return gpu_loads_of(passes_since(generation, first_arrival), num_gpus);
}

void Recorder::validate_placement(const Placement& placement) const {
  MOESTAT_CHECK(placement.num_layers() == topology_.num_layers &&
                    placement.num_physical_experts() == topology_.num_physical_experts &&
                    placement.num_logical_experts() == topology_.num_logical_experts,
                "placement is [L={}, P={}] over E={} experts but the topology has L={}, P={}, E={}",
                placement.num_layers(), placement.num_physical_experts(),
                placement.num_logical_experts(), topology_.num_layers,
                topology_.num_physical_experts, topology_.num_logical_experts);
}

}  // namespace moestat
