// The CPU backend of the recorder: for C++ engines running on the host, for tests, and as
// the reference the CUDA backend is checked against.
#pragma once

#include <atomic>
#include <memory>
#include <moestat/recorder.hpp>
#include <mutex>
#include <vector>

namespace moestat::detail {
class PassAccumulator;
}

namespace moestat::record {

/// Records on the host. Hooks write a private per-pass buffer without locking; end_pass
/// commits it under a mutex the control calls share, so control never sees half a pass.
class CpuRecorder final : public Recorder {
 public:
  /// Starts stopped, with the trivial placement (version 0). Throws moestat::Error on an
  /// invalid topology or options.
  explicit CpuRecorder(ModelTopology topology, RecorderOptions options = {});
  ~CpuRecorder() override;

  void start() override;
  void stop() override;
  void reset() override;
  bool is_recording() const override;
  Snapshot snapshot() const override;
  PassesSince passes_since(std::uint64_t generation, std::int64_t first_arrival) const override;
  void set_placement(const Placement& placement) override;

 protected:
  void do_begin_pass(std::int64_t pass_id) override;
  void do_record_topk(std::int64_t layer, const TensorView& topk_ids,
                      std::int64_t num_valid_tokens) override;
  void do_record_topk(std::int64_t layer, const TensorView& topk_ids,
                      const TensorView& num_valid_tokens) override;
  void do_record_local_counts(std::int64_t layer, const TensorView& counts,
                              std::int64_t first_physical_expert) override;
  void do_end_pass() override;
  void do_abort_pass() override;

 private:
  std::int64_t* layer_row(std::int64_t layer);
  void grow_trace(std::int64_t num_tokens);

  // Forward-thread state of the open pass.
  bool pass_recorded_ = false;
  std::uint64_t pass_epoch_ = 0;
  std::int64_t pass_id_ = 0;
  /// [L, P + 2]: columns [0, P) count ids, column P out-of-range ids, column P + 1 padding
  /// (-1). The two extra bins let the counting loop run without a data-dependent branch.
  std::vector<std::int64_t> pass_counts_;
  std::vector<std::int64_t> layer_tokens_;    ///< [L] tokens recorded per layer this pass.
  std::vector<std::uint8_t> layer_touched_;   ///< [L] 1 once a hook wrote the layer this pass.
  std::vector<std::int64_t> touched_layers_;  ///< Layers written this pass, to clear next pass.
  std::vector<std::int32_t> pass_trace_;      ///< Per-token mode: [tokens, L, top_k], -1 = none.
  std::int64_t pass_trace_capacity_ = 0;      ///< Tokens pass_trace_ can hold.

  // Shared with control calls.
  mutable std::mutex mutex_;
  std::atomic<bool> recording_{false};
  /// Bumped by start/stop/reset; a pass whose epoch changed while it ran is not committed.
  std::atomic<std::uint64_t> epoch_{0};
  std::unique_ptr<detail::PassAccumulator> accumulator_;
};

}  // namespace moestat::record
