// The CUDA backend of the recorder: exact, safe inside captured CUDA graphs, and cheap
// enough to run in every MoE layer of every forward pass.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <moestat/record/fused_target.hpp>
#include <moestat/recorder.hpp>
#include <mutex>

namespace moestat::record {

/// Options only the CUDA backend has.
struct CudaOptions {
  /// per_token mode: the trace file passes drain into (docs/formats.md). Required there.
  std::filesystem::path trace_path;
  /// per_token mode: tokens one pass can stage on the device; more are dropped and counted.
  std::int64_t max_tokens_per_pass = 8192;
  /// per_token mode: passes the host ring can hold before the writer thread catches up.
  std::int64_t max_pending_passes = 4096;
  /// per_token mode: bytes of trace file allocated when the recorder is created (see
  /// io::TraceWriterOptions). Passes that land inside drain at memory speed (over 10 GB/s
  /// into /dev/shm on an H200 host) instead of the few GB/s of appending; size it to the
  /// trace you expect (tokens x layers x top_k x 4 bytes). 0: none.
  std::uint64_t trace_reserve_bytes = 0;
  /// per_token mode: threads that copy one large pass into the reserve.
  unsigned trace_copy_threads = 4;
  /// per_pass mode and unbounded windows (window_size = -1): ended passes wait in a device
  /// ring of this many passes until the collector thread copies them to the host.
  std::int64_t pass_ring_size = 256;
  /// How often the collector thread copies new passes out of the ring. A pass whose slot
  /// is reused first (more than pass_ring_size passes in one interval) is dropped whole and
  /// counted in Snapshot::dropped_passes. Zero: no thread; only snapshot() collects.
  std::chrono::microseconds pass_collect_interval{1000};
};

/// Records on the GPU. All memory is allocated at construction; hooks only enqueue kernels
/// on the engine's stream (no host synchronisation, allocation or host branching on device
/// data), so every hook can be captured in a CUDA graph and replayed.
///
/// - The recording flag, window cursor and valid-token count live in device memory: one
///   captured graph serves recording on and off, and successive replays fill successive
///   window slots.
/// - Control calls (start, stop, reset, set_placement) write a small control block in
///   device memory; the device latches it when a pass begins, so a pass is recorded
///   wholly or not at all and control never touches the engine's stream. They take effect
///   at the next pass that begins on the device.
/// - snapshot() copies on a private stream under a sequence lock and returns only whole,
///   ended passes.
///
/// - per_token mode: each layer's ids are staged on the device; at end_pass a side stream
///   (forked and joined with events) copies the pass into a pinned host ring of
///   `options.per_token_capacity` tokens, and a writer thread appends it to
///   `cuda_options.trace_path`. When the writer falls behind, whole tokens are dropped and
///   counted (snapshot().dropped_tokens); the recording stream never waits for the host.
///
/// - stat_approx mode: record_local_counts takes DeepEP normal dispatch's host counts (a
///   host tensor) as well as device `masked_m`.
///
/// - per_pass mode and unbounded windows: ended passes wait in a device ring that a host
///   thread empties every `cuda_options.pass_collect_interval` on a stream of its own; a
///   pass whose slot the engine reused before the copy is dropped whole and counted
///   (snapshot().dropped_passes). Again the recording stream never waits for the host.
///
/// Hooks must come from one stream at a time (set_stream); tensors must live on the
/// recorder's device.
///
/// - Hooks captured outside a pass: while the recorder's stream is being captured,
///   record_topk and record_local_counts are taken with no pass open on the host (SGLang
///   captures its decode graphs outside its forward-pass context). Their kernels count into
///   whichever pass is open on the device when the graph replays: enqueue begin_pass and
///   end_pass eagerly on the same stream around the launch; the flag that begin_pass
///   latches decides, as usual, whether that pass records. per_token mode still needs its
///   hooks inside a pass.
///
/// Example, recording inside a captured graph:
/// @code
///   moestat::record::CudaRecorder recorder(topology, {.mode = moestat::RecordMode::kStat});
///   recorder.set_stream(stream);
///   cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
///   recorder.begin_pass(0);
///   for (int layer : moe_layers) recorder.record_topk(layer, topk_ids[layer], num_valid_device);
///   recorder.end_pass();
///   cudaStreamEndCapture(stream, &graph);
///   recorder.start();  // from any thread, any time; replays record from the next pass
/// @endcode
class CudaRecorder final : public Recorder {
 public:
  /// Allocates every buffer on `device` (the current device when -1).
  CudaRecorder(ModelTopology topology, RecorderOptions options = {}, int device = -1,
               CudaOptions cuda_options = {});
  ~CudaRecorder() override;

  /// The stream hooks enqueue their kernels on (the legacy default stream until set).
  /// Forward-thread state, like the hooks.
  void set_stream(cudaStream_t stream) noexcept { stream_ = stream; }
  cudaStream_t stream() const noexcept { return stream_; }
  int device() const noexcept { return device_; }

  /// per_token mode: blocks until every pass the device has ended is in the trace file.
  /// Call it once the engine's stream has run those passes (e.g. after synchronising it).
  void drain_trace();

  /// For an engine kernel that counts its own routing (moestat/record/cuda_fused.cuh):
  /// layer `layer` of the open pass, as a kernel parameter. Checks the layer (in range,
  /// MoE) and the mode (stat, per_pass or decayed; stat_approx takes local counts and
  /// per_token stages ids through record_topk). Call once; the value serves every pass.
  FusedRecordTarget fused_target(std::int64_t layer) const;

  /// For an engine kernel that adds per-expert token counts itself without looking at the
  /// recording flag (SGLang's fused dispatch map adds one per routed (token, k)): layer
  /// `layer`'s row of the open pass, [P] int32 in device memory, which end_pass folds into
  /// the pass. begin_pass clears it when the pass records; what is added while no pass
  /// records is never committed. Checks as fused_target. The pointer serves every pass and
  /// lives as long as the recorder.
  std::int32_t* pass_count_row(std::int64_t layer) const;

  void start() override;
  void stop() override;
  void reset() override;
  bool is_recording() const override;
  Snapshot snapshot() const override;
  PassesSince passes_since(std::uint64_t generation, std::int64_t first_arrival) const override;
  /// In decayed mode the device needs the map itself: a second change before any pass has
  /// begun since the first is refused with a moestat::Error.
  void set_placement(const Placement& placement) override;

 protected:
  void do_begin_pass(std::int64_t pass_id) override;
  void do_record_topk(std::int64_t layer, const TensorView& topk_ids,
                      std::int64_t num_valid_tokens) override;
  void do_record_topk(std::int64_t layer, const TensorView& topk_ids,
                      const TensorView& num_valid_tokens) override;
  /// One kernel for up to 64 layers (per_token mode: one per layer, as record_topk).
  void do_record_topk_layers(std::span<const LayerTopk> layers,
                             std::int64_t num_valid_tokens) override;
  void do_record_topk_layers(std::span<const LayerTopk> layers,
                             const TensorView& num_valid_tokens) override;
  void do_record_local_counts(std::int64_t layer, const TensorView& counts,
                              std::int64_t first_physical_expert) override;
  void do_end_pass() override;
  void do_abort_pass() override;
  /// stat and stat_approx: reduced on the device from the window ring, under its sequence
  /// lock, on the recorder's own stream; only the result is copied to the host. per_pass:
  /// the collected passes are on the host already and are reduced there.
  GpuLoadsSince do_gpu_loads_since(std::uint64_t generation, std::int64_t first_arrival,
                                   std::int64_t num_gpus) const override;
  /// While stream() is being captured (a failed query is a moestat::Error): the captured
  /// kernels run inside whatever pass is open on the device at replay.
  bool accepts_hooks_outside_pass() const override;

 private:
  struct Resources;

  void require_on_device(const TensorView& view, const char* what) const;
  /// A read of passes since an arrival before the storage fills it: the model's sizes and the
  /// current generation. Under the control mutex.
  PassesSince empty_passes_since() const;
  /// Throws unless an engine kernel can count into `layer` (in range, MoE, a mode with
  /// per-pass counts); `caller` names the API in the message.
  void check_engine_layer(std::int64_t layer, const char* caller) const;
  void launch_topk(std::int64_t layer, const TensorView& topk_ids, const void* device_count,
                   bool count_int64, std::int64_t host_count);
  void launch_topk_layers(std::span<const LayerTopk> layers, const void* device_count,
                          bool count_int64, std::int64_t host_count);

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  CudaOptions cuda_options_;
  std::unique_ptr<Resources> resources_;

  mutable std::mutex mutex_;  // serialises control calls
  std::uint64_t requested_epoch_ = 0;
  std::atomic<bool> recording_requested_{false};
  std::map<std::uint64_t, Placement> placements_;  // every version a pass may refer to
};

}  // namespace moestat::record
