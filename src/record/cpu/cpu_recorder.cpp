#include <algorithm>
#include <limits>
#include <moestat/error.hpp>
#include <moestat/record/cpu_recorder.hpp>

#include "pass_accumulator.hpp"
#include "topk_histogram.hpp"

namespace moestat::record {

CpuRecorder::CpuRecorder(ModelTopology topology, RecorderOptions options)
    : Recorder(std::move(topology), options) {
  const ModelTopology& model = this->topology();
  pass_counts_.assign(std::size_t(model.num_layers * (model.num_physical_experts + 2)), 0);
  layer_tokens_.assign(std::size_t(model.num_layers), 0);
  layer_touched_.assign(std::size_t(model.num_layers), 0);
  touched_layers_.reserve(std::size_t(model.num_layers));
  accumulator_ = std::make_unique<detail::PassAccumulator>(model, this->options());
}

CpuRecorder::~CpuRecorder() = default;

std::int64_t* CpuRecorder::layer_row(std::int64_t layer) {
  if (!layer_touched_[std::size_t(layer)]) {
    layer_touched_[std::size_t(layer)] = 1;
    touched_layers_.push_back(layer);
  }
  return pass_counts_.data() + layer * (topology().num_physical_experts + 2);
}

void CpuRecorder::grow_trace(std::int64_t num_tokens) {
  if (num_tokens <= pass_trace_capacity_) return;
  const std::int64_t capacity = std::max(num_tokens, 2 * pass_trace_capacity_);
  pass_trace_.resize(std::size_t(capacity * topology().num_layers * topology().top_k), -1);
  pass_trace_capacity_ = capacity;
}

void CpuRecorder::do_begin_pass(std::int64_t pass_id) {
  // NOTE: epoch before recording: start() sets recording_ before bumping epoch_, so a pass
  // that sees the new recording_ with the old epoch is discarded at end_pass.
  pass_epoch_ = epoch_.load(std::memory_order_acquire);
  pass_recorded_ = recording_.load(std::memory_order_acquire);
  pass_id_ = pass_id;
  if (!pass_recorded_) return;
  const std::int64_t row_size = topology().num_physical_experts + 2;
  const std::int64_t token_size = topology().num_layers * topology().top_k;
  std::int64_t trace_tokens = 0;
  for (std::int64_t layer : touched_layers_) {
    std::fill_n(pass_counts_.begin() + layer * row_size, row_size, 0);
    trace_tokens = std::max(trace_tokens, layer_tokens_[std::size_t(layer)]);
    layer_tokens_[std::size_t(layer)] = 0;
    layer_touched_[std::size_t(layer)] = 0;
  }
  if (!pass_trace_.empty()) std::fill_n(pass_trace_.begin(), trace_tokens * token_size, -1);
  touched_layers_.clear();
}

void CpuRecorder::do_record_topk(std::int64_t layer, const TensorView& topk_ids,
                                 std::int64_t num_valid_tokens) {
  // NOTE: inputs are checked before the recording test so that a call fails (or not) the
  // same way whether or not recording is on.
  topk_ids.require_cpu("topk_ids");
  if (!pass_recorded_) return;
  std::int64_t* row = layer_row(layer);
  std::int64_t& first_token = layer_tokens_[std::size_t(layer)];
  // NOTE: no trace pointer without tokens: the trace may still be unallocated (null), and
  // offsetting a null pointer is undefined behaviour.
  if (options().mode == RecordMode::kPerToken && num_valid_tokens > 0) {
    grow_trace(first_token + num_valid_tokens);
    const std::int64_t token_size = topology().num_layers * topology().top_k;
    detail::TraceSink trace{
        pass_trace_.data() + first_token * token_size + layer * topology().top_k, token_size};
    detail::count_topk(topk_ids, num_valid_tokens, topology().num_physical_experts, row, &trace);
  } else {
    detail::count_topk(topk_ids, num_valid_tokens, topology().num_physical_experts, row, nullptr);
  }
  first_token += num_valid_tokens;
}

void CpuRecorder::do_record_topk(std::int64_t, const TensorView&, const TensorView&) {
  // Recorder reads host counts itself; only a device count reaches a backend.
  MOESTAT_FAIL("num_valid_tokens is in CUDA memory; the CPU recorder needs host memory");
}

void CpuRecorder::do_record_local_counts(std::int64_t layer, const TensorView& counts,
                                         std::int64_t first_physical_expert) {
  counts.require_cpu("local counts");
  const std::int64_t num_local = topology().num_local_experts();
  // Validate every entry before adding any, so a bad tensor never leaves half a layer.
  for (std::int64_t j = 0; j < num_local; ++j) {
    MOESTAT_CHECK(counts.int_at({j}) >= 0, "local counts: entry {} is negative ({})", j,
                  counts.int_at({j}));
  }
  if (!pass_recorded_) return;
  std::int64_t* row = layer_row(layer);
  // Checked before any is added, as above: the pass may already hold counts for the layer.
  // (Both are non-negative, so the subtraction cannot overflow.)
  for (std::int64_t j = 0; j < num_local; ++j) {
    MOESTAT_CHECK(counts.int_at({j}) <=
                      std::numeric_limits<std::int64_t>::max() - row[first_physical_expert + j],
                  "record_local_counts: layer {}, physical expert {}: the pass's count "
                  "overflows int64",
                  layer, first_physical_expert + j);
  }
  for (std::int64_t j = 0; j < num_local; ++j) row[first_physical_expert + j] += counts.int_at({j});
}

void CpuRecorder::do_abort_pass() {
  // Nothing of the pass has left its buffers, which the next begin_pass clears.
}

void CpuRecorder::do_end_pass() {
  if (!pass_recorded_) return;
  const std::int64_t num_physical = topology().num_physical_experts;
  const std::int64_t row_size = num_physical + 2;
  detail::PassRecord pass;
  pass.pass_id = pass_id_;
  pass.physical_counts = pass_counts_;
  pass.row_stride = row_size;
  for (std::int64_t layer : touched_layers_) {
    pass.dropped_ids += pass_counts_[std::size_t(layer * row_size + num_physical)];
    pass.num_tokens = std::max(pass.num_tokens, layer_tokens_[std::size_t(layer)]);
  }
  if (options().mode == RecordMode::kPerToken) {
    pass.num_trace_tokens = pass.num_tokens;
    pass.trace_ids = pass_trace_;
  }
  std::lock_guard lock(mutex_);
  if (recording_.load(std::memory_order_relaxed) &&
      epoch_.load(std::memory_order_relaxed) == pass_epoch_) {
    accumulator_->commit(pass);
  }
}

void CpuRecorder::start() {
  std::lock_guard lock(mutex_);
  accumulator_->clear();
  recording_.store(true, std::memory_order_release);
  epoch_.fetch_add(1, std::memory_order_acq_rel);
}

void CpuRecorder::stop() {
  std::lock_guard lock(mutex_);
  recording_.store(false, std::memory_order_release);
  epoch_.fetch_add(1, std::memory_order_acq_rel);
}

void CpuRecorder::reset() {
  std::lock_guard lock(mutex_);
  accumulator_->clear();
  epoch_.fetch_add(1, std::memory_order_acq_rel);
}

bool CpuRecorder::is_recording() const { return recording_.load(std::memory_order_acquire); }

Snapshot CpuRecorder::snapshot() const {
  std::lock_guard lock(mutex_);
  return accumulator_->snapshot();
}

PassesSince CpuRecorder::passes_since(std::uint64_t generation, std::int64_t first_arrival) const {
  std::lock_guard lock(mutex_);
  return accumulator_->passes_since(generation, first_arrival);
}

void CpuRecorder::set_placement(const Placement& placement) {
  validate_placement(placement);
  std::lock_guard lock(mutex_);
  accumulator_->set_placement(placement);
}

}  // namespace moestat::record
