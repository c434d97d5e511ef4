// The recorder interface every backend (CPU, CUDA) implements, and its RAII helpers.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <moestat/gpu_loads.hpp>
#include <moestat/placement.hpp>
#include <moestat/record_mode.hpp>
#include <moestat/snapshot.hpp>
#include <moestat/tensor_view.hpp>
#include <moestat/topology.hpp>
#include <mutex>
#include <span>

namespace moestat {

class LayerScope;
class DisabledRegion;

/// Records which experts a model's tokens are routed to, pass by pass.
///
/// Two kinds of callers:
/// - **Hooks** (`begin_pass`, `record_topk`, `record_local_counts`, `end_pass`) are called by
///   the engine's forward thread, in order, once per MoE layer per pass. Called from several
///   threads at once they run one after another (a lock), all into the one open pass: safe,
///   but the passes are then whatever the calls' order makes them. A layer hook outside a pass
///   is an error
///   (CudaRecorder also takes one while its stream is being captured into a CUDA graph).
/// - **Control** (`start`, `stop`, `reset`, `snapshot`, `set_placement`, `is_recording`) may
///   be called from any thread at any time, also while passes run. A pass is recorded only
///   if recording was on when it began and no start/stop/reset happened before it ended, so
///   a snapshot holds every pass wholly or not at all.
///
/// Every count is attributed to the layer passed to the hook (or set by a LayerScope); a
/// hook with no layer, a layer out of range or a dense layer is an error, never slot 0.
///
/// Example (an engine's forward loop):
/// @code
///   moestat::record::CpuRecorder recorder(topology, {.mode = moestat::RecordMode::kStat});
///   recorder.start();
///   recorder.begin_pass(step);
///   for (int layer : moe_layers) {
///     auto ids = moestat::TensorView::contiguous(topk.data(), moestat::DType::kInt32,
///                                                {num_tokens, top_k});
///     recorder.record_topk(layer, ids, num_valid_tokens);
///   }
///   recorder.end_pass();
///   moestat::Snapshot snapshot = recorder.snapshot();
/// @endcode
class Recorder {
 public:
  /// `num_valid_tokens` value meaning "every row of topk_ids is a real token".
  static constexpr std::int64_t kAllTokens = -1;

  Recorder(ModelTopology topology, RecorderOptions options);
  virtual ~Recorder() = default;
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // ---- Hooks (forward thread) ----

  /// Opens a pass. `pass_id` is the engine's step or batch id, kept in the snapshot.
  void begin_pass(std::int64_t pass_id);

  /// Counts the router's choices of one layer.
  /// `topk_ids`: [num_tokens, num_columns] int32 or int64 ids of physical expert slots
  ///   (what an engine with expert parallelism routes to), any strides; the placement in
  ///   force maps each slot to its logical expert. A model without replicas (transformers)
  ///   routes to its logical experts directly: with P == E and the trivial placement (the
  ///   default, slot p = expert p) its logical ids are these slot ids, unchanged.
  ///   -1 marks padding and is ignored; other ids outside [0, P) are dropped and tallied.
  ///   Per-token mode needs num_columns == top_k (slice off fused shared-expert columns).
  /// `num_valid_tokens`: only the first rows are real tokens (a padded graph batch);
  ///   kAllTokens for all. More than num_tokens is an error.
  void record_topk(std::int64_t layer, const TensorView& topk_ids,
                   std::int64_t num_valid_tokens = kAllTokens);
  /// As above, with the valid-token count read from a one-element int32/int64 tensor
  /// (in device memory for the CUDA backend, so a captured graph replays correctly).
  void record_topk(std::int64_t layer, const TensorView& topk_ids,
                   const TensorView& num_valid_tokens);
  /// As above, for the layer of the innermost LayerScope; an error outside any LayerScope.
  void record_topk(const TensorView& topk_ids, std::int64_t num_valid_tokens = kAllTokens);

  /// One MoE layer's router choices, for record_topk_layers.
  struct LayerTopk {
    std::int64_t layer;
    TensorView topk_ids;
  };
  /// record_topk for several layers of the open pass at once, every layer with the same
  /// valid-token count (kAllTokens: all rows of each). Counts exactly what the calls one by one
  /// would; if any layer or matrix is invalid, nothing is counted. For engines that can keep
  /// each layer's ids until the pass ends: CudaRecorder counts up to 64 layers in one kernel,
  /// one node of a captured graph instead of one per layer, off the path between the layers.
  void record_topk_layers(std::span<const LayerTopk> layers,
                          std::int64_t num_valid_tokens = kAllTokens);
  /// As above, with the count read from a one-element int32/int64 tensor (see record_topk).
  void record_topk_layers(std::span<const LayerTopk> layers, const TensorView& num_valid_tokens);

  /// Adds per-local-expert token counts of one rank: DeepEP low-latency `masked_m` (exact)
  /// or DeepEP normal-dispatch host counts (stat_approx).
  /// `counts`: [num_local_experts + num_shared_expert_slots] int32 or int64; the trailing
  ///   shared-expert slots are dropped; any other length is an error.
  /// `rank`: local slot j is physical expert rank * P / ep_size + j.
  void record_local_counts(std::int64_t layer, const TensorView& counts, std::int64_t rank);
  /// As above, for the layer of the innermost LayerScope.
  void record_local_counts(const TensorView& counts, std::int64_t rank);

  /// Closes the pass and commits it (if recorded) to the window, decayed sum or token ring.
  void end_pass();
  /// Closes the pass without committing it: what its hooks counted is discarded, as if it had
  /// not begun (for a forward that failed part-way). Eager passes only: in a captured graph,
  /// whether a replay fails is not known when the graph is captured.
  void abort_pass();

  /// Sets the layer that scope-style hooks attribute data to, until the scope ends. Nests.
  [[nodiscard]] LayerScope layer_scope(std::int64_t layer);
  /// Hooks inside the region are ignored (speculative draft-model layers). Nests.
  [[nodiscard]] DisabledRegion disabled_region();

  // ---- Control (any thread) ----

  /// Clears everything recorded and starts recording from the next pass.
  virtual void start() = 0;
  /// Stops recording; what was recorded stays until start() or reset().
  virtual void stop() = 0;
  /// Clears everything recorded; recording stays on or off as it was.
  virtual void reset() = 0;
  virtual bool is_recording() const = 0;
  /// A copy of everything recorded so far, with logical ids resolved.
  virtual Snapshot snapshot() const = 0;
  /// The passes of the pass window (stat, stat_approx, per_pass) from arrival
  /// `first_arrival` of `generation` on: only those rows are copied, so a reader that follows
  /// the recorder pays for the new passes, not the window. A `generation` other than the
  /// recorder's (0 before the first read) reads from arrival 0 of the current one. Passes
  /// that already left the window are counted in missed_passes. moestat::Error in the
  /// other modes, or for an arrival beyond the next one.
  ///
  /// @code
  ///   moestat::PassesSince passes;
  ///   for (;;) {
  ///     passes = recorder.passes_since(passes.generation, passes.next_arrival());
  ///     use(passes.physical_counts);  // passes.size() rows of [L, P]
  ///   }
  /// @endcode
  virtual PassesSince passes_since(std::uint64_t generation, std::int64_t first_arrival) const = 0;
  /// The passes passes_since(generation, first_arrival) reads, each reduced to its GPU loads
  /// [L, num_gpus] and balancedness, with their logical counts summed into [L, E]: what live
  /// metrics need, at the cost of those (the CUDA recorder reduces its window ring on the
  /// device and copies only the result). moestat::Error unless num_gpus >= 1 divides P, and as
  /// passes_since.
  ///
  /// @code
  ///   moestat::GpuLoadsSince loads;
  ///   for (;;) {
  ///     loads = recorder.gpu_loads_since(loads.generation, loads.next_arrival(), 8);
  ///     use(loads.balancedness);  // loads.size() passes
  ///   }
  /// @endcode
  GpuLoadsSince gpu_loads_since(std::uint64_t generation, std::int64_t first_arrival,
                                std::int64_t num_gpus) const;
  /// Makes `placement` current for passes that end from now on. Its shape must match the
  /// topology and its version must be higher than the current one's.
  virtual void set_placement(const Placement& placement) = 0;

  const ModelTopology& topology() const noexcept { return topology_; }
  const RecorderOptions& options() const noexcept { return options_; }

 protected:
  /// Backend entry points; arguments are already validated against the topology and mode.
  virtual void do_begin_pass(std::int64_t pass_id) = 0;
  virtual void do_record_topk(std::int64_t layer, const TensorView& topk_ids,
                              std::int64_t num_valid_tokens) = 0;
  /// `num_valid_tokens` is a one-element integer tensor in device memory (host counts are
  /// read by Recorder and arrive through the other overload).
  virtual void do_record_topk(std::int64_t layer, const TensorView& topk_ids,
                              const TensorView& num_valid_tokens) = 0;
  /// Validated layers; `num_valid_tokens` is kAllTokens or a count no layer's rows exceed.
  /// By default: do_record_topk layer by layer.
  virtual void do_record_topk_layers(std::span<const LayerTopk> layers,
                                     std::int64_t num_valid_tokens);
  /// `num_valid_tokens` in device memory, as for do_record_topk. By default: layer by layer.
  virtual void do_record_topk_layers(std::span<const LayerTopk> layers,
                                     const TensorView& num_valid_tokens);
  virtual void do_record_local_counts(std::int64_t layer, const TensorView& counts,
                                      std::int64_t first_physical_expert) = 0;
  virtual void do_end_pass() = 0;
  virtual void do_abort_pass() = 0;
  /// gpu_loads_since with its arguments checked; by default the rows of passes_since reduced
  /// on the host (gpu_loads_of).
  virtual GpuLoadsSince do_gpu_loads_since(std::uint64_t generation, std::int64_t first_arrival,
                                           std::int64_t num_gpus) const;

  /// Throws unless `placement` fits the topology; shared by every backend.
  void validate_placement(const Placement& placement) const;

  /// Whether record_topk / record_local_counts may run while no pass is open on the host.
  /// Consulted only then. No by default: a host backend counts into the open pass at once.
  /// A backend whose hooks only enqueue work (CudaRecorder while its stream is captured)
  /// can say yes: the work runs later, inside whichever pass is open when it runs.
  virtual bool accepts_hooks_outside_pass() const { return false; }

 private:
  friend class LayerScope;
  friend class DisabledRegion;

  // NOTE: not -1, so an explicit layer -1 is reported as out of range, not as missing.
  static constexpr std::int64_t kNoLayer = std::numeric_limits<std::int64_t>::min();

  void check_hook_layer(std::int64_t layer, const char* hook) const;
  void check_topk_ids(const TensorView& topk_ids) const;
  void check_topk_layers(std::span<const LayerTopk> layers) const;
  /// A one-element num_valid_tokens held in host memory, read and checked against `rows`.
  static std::int64_t host_valid_count(const TensorView& num_valid_tokens, std::int64_t rows,
                                       const char* hook);

  ModelTopology topology_;
  RecorderOptions options_;
  /// Held by every hook for its whole call. Hooks belong to the forward thread, but an engine
  /// (or a Python program) that calls them from several threads at once must get hooks that
  /// run one after another, never a crash. Uncontended, the lock adds about 4 ns to a hook
  /// call (docs/BENCHMARKS.md).
  std::mutex hook_mutex_;
  // Forward state: which pass is open, which layer a scope set, disabled depth.
  bool pass_open_ = false;
  std::atomic<std::int64_t> scope_layer_{kNoLayer};
  std::atomic<int> disabled_depth_{0};
};

/// RAII: sets the recorder's current layer for scope-style hooks, restores the previous one.
class LayerScope {
 public:
  LayerScope(const LayerScope&) = delete;
  LayerScope& operator=(const LayerScope&) = delete;
  ~LayerScope() { recorder_.scope_layer_.store(previous_layer_, std::memory_order_relaxed); }

 private:
  friend class Recorder;
  LayerScope(Recorder& recorder, std::int64_t layer)
      : recorder_(recorder),
        previous_layer_(recorder.scope_layer_.load(std::memory_order_relaxed)) {
    recorder.scope_layer_.store(layer, std::memory_order_relaxed);
  }
  Recorder& recorder_;
  std::int64_t previous_layer_;
};

/// RAII: hooks are ignored while at least one region is alive.
class DisabledRegion {
 public:
  DisabledRegion(const DisabledRegion&) = delete;
  DisabledRegion& operator=(const DisabledRegion&) = delete;
  ~DisabledRegion() { recorder_.disabled_depth_.fetch_sub(1, std::memory_order_relaxed); }

 private:
  friend class Recorder;
  explicit DisabledRegion(Recorder& recorder) : recorder_(recorder) {
    recorder.disabled_depth_.fetch_add(1, std::memory_order_relaxed);
  }
  Recorder& recorder_;
};

}  // namespace moestat
