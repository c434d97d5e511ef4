#include <algorithm>
#include <atomic>
#include <moestat/record/cuda_recorder.hpp>
#include <vector>

#include "cuda_check.hpp"
#include "device_state.cuh"
#include "logical_counts.hpp"
#include "pass_collector.hpp"
#include "record_kernels.cuh"
#include "trace_drain.hpp"

namespace moestat::record {

namespace {

/// Makes `device` current for the lifetime of the guard, restoring the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    MOESTAT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) MOESTAT_CUDA_CHECK(cudaSetDevice(device));
    changed_ = previous_ != device;
  }
  ~DeviceGuard() {
    if (changed_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

/// Whether `status` from cudaGetDeviceCount means there is no driver or no GPU to use (as on a
/// machine without a GPU, or with a driver older than the runtime), rather than a failure.
bool means_no_usable_gpu(cudaError_t status) {
  switch (status) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return true;
    default:
      return false;
  }
}

/// Checks that this machine has a CUDA driver and a GPU, and `device` (-1: the current one)
/// among them, before any other CUDA call: without them the first call would fail with a
/// runtime error name ("cudaGetDevice(&device) failed: cudaErrorInsufficientDriver") that
/// does not say what to do.
void require_usable_device(int device) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky, but leave no error behind for later calls
    if (means_no_usable_gpu(status)) {
      MOESTAT_FAIL(
          "CudaRecorder: no usable CUDA driver or GPU on this machine ({}: {}); record with "
          "CpuRecorder, or run where a GPU is",
          cudaGetErrorName(status), cudaGetErrorString(status));
    }
    cuda::throw_cuda_error("cudaGetDeviceCount(&count)", status, __FILE__, __LINE__);
  }
  MOESTAT_CHECK(count > 0,
                "CudaRecorder: no CUDA GPU on this machine; record with CpuRecorder, or run "
                "where a GPU is");
  MOESTAT_CHECK(device < count, "CudaRecorder: device {} does not exist; this machine has {}",
                device,
                count == 1 ? std::string("1 CUDA GPU (device 0)")
                           : fmt::format("{} CUDA GPUs (devices 0 to {})", count, count - 1));
}

template <typename T>
T* device_alloc(std::int64_t count) {
  void* pointer = nullptr;
  MOESTAT_CUDA_CHECK(
      cudaMalloc(&pointer, std::size_t(std::max<std::int64_t>(count, 1)) * sizeof(T)));
  MOESTAT_CUDA_CHECK(
      cudaMemset(pointer, 0, std::size_t(std::max<std::int64_t>(count, 1)) * sizeof(T)));
  return static_cast<T*>(pointer);
}

template <typename T>
void copy_to_host(std::vector<T>& out, const T* device, std::int64_t count, cudaStream_t stream) {
  out.resize(std::size_t(count));
  if (count == 0) return;
  MOESTAT_CUDA_CHECK(cudaMemcpyAsync(out.data(), device, std::size_t(count) * sizeof(T),
                                     cudaMemcpyDeviceToHost, stream));
}

}  // namespace

/// Everything allocated at construction and freed at destruction.
struct CudaRecorder::Resources {
  cuda::DeviceBuffers buffers{};
  cuda::ControlBlock* control = nullptr;  // device memory, written by control calls
  cuda::ControlBlock requested{};         // host copy of what control calls last wrote
  std::vector<void*> allocations;
  cudaStream_t control_stream = nullptr;  // snapshots and placement uploads
  int32_t* placement_maps = nullptr;
  // Per-token mode: the side stream that copies passes to the host, its fork/join events,
  // and the host ring with its writer thread.
  cudaStream_t trace_stream = nullptr;
  cudaEvent_t trace_fork = nullptr;
  cudaEvent_t trace_join = nullptr;
  std::unique_ptr<cuda::TraceDrain> drain;
  // per_pass mode and unbounded windows: the thread that keeps passes before the ring
  // reuses their slots.
  std::unique_ptr<cuda::PassCollector> collector;
  std::int64_t* local_counts = nullptr;         // [P / ep_size] device copy of host local counts
  std::vector<std::int64_t> host_local_counts;  // [P / ep_size] reused, no allocation per call

  /// Writes one field of the device control block and waits for it to land, so the
  /// next pass to begin on the device sees it.
  template <typename T>
  void write_control(T cuda::ControlBlock::*field, T value) {
    requested.*field = value;
    MOESTAT_CUDA_CHECK(cudaMemcpyAsync(&(control->*field), &(requested.*field), sizeof(T),
                                       cudaMemcpyHostToDevice, control_stream));
    MOESTAT_CUDA_CHECK(cudaStreamSynchronize(control_stream));
  }

  template <typename T>
  T* allocate(std::int64_t count) {
    T* pointer = device_alloc<T>(count);
    allocations.push_back(pointer);
    return pointer;
  }

  ~Resources() {
    if (trace_stream != nullptr) cudaStreamSynchronize(trace_stream);
    drain.reset();  // writes what the last copies published
    collector.reset();
    for (void* pointer : allocations) cudaFree(pointer);
    if (control_stream != nullptr) cudaStreamDestroy(control_stream);
    if (trace_stream != nullptr) cudaStreamDestroy(trace_stream);
    if (trace_fork != nullptr) cudaEventDestroy(trace_fork);
    if (trace_join != nullptr) cudaEventDestroy(trace_join);
  }
};

CudaRecorder::CudaRecorder(ModelTopology topology, RecorderOptions options, int device,
                           CudaOptions cuda_options)
    : Recorder(std::move(topology), options),
      cuda_options_(std::move(cuda_options)),
      resources_(std::make_unique<Resources>()) {
  const RecordMode mode = this->options().mode;
  const bool windowed = mode == RecordMode::kStat || mode == RecordMode::kStatApprox;
  const bool collected =
      mode == RecordMode::kPerPass || (windowed && this->options().window_size < 0);
  MOESTAT_CHECK(mode != RecordMode::kPerToken || !cuda_options_.trace_path.empty(),
                "per_token mode on the CUDA recorder needs a trace file to drain the tokens "
                "into (trace_path)");
  MOESTAT_CHECK(
      cuda_options_.max_tokens_per_pass > 0 && cuda_options_.max_pending_passes > 0,
      "CudaOptions: max_tokens_per_pass ({}) and max_pending_passes ({}) must be positive",
      cuda_options_.max_tokens_per_pass, cuda_options_.max_pending_passes);
  MOESTAT_CHECK(!collected || cuda_options_.pass_ring_size > 0,
                "CudaOptions: pass_ring_size must be positive, got {}",
                cuda_options_.pass_ring_size);
  require_usable_device(device);
  if (device < 0) MOESTAT_CUDA_CHECK(cudaGetDevice(&device));
  device_ = device;
  DeviceGuard guard(device_);

  const ModelTopology& model = this->topology();
  const std::int64_t num_layers = model.num_layers;
  const std::int64_t num_physical = model.num_physical_experts;
  const std::int64_t num_logical = model.num_logical_experts;
  // One more slot than the window: the open pass writes a slot of its own, so the window
  // always holds window_size whole passes. Collected modes keep a ring the collector
  // thread empties.
  const std::int64_t ring = collected ? cuda_options_.pass_ring_size : this->options().window_size;
  const std::int64_t num_slots = windowed || collected ? ring + 1 : 1;

  Resources& r = *resources_;
  MOESTAT_CUDA_CHECK(cudaStreamCreateWithFlags(&r.control_stream, cudaStreamNonBlocking));
  r.control = r.allocate<cuda::ControlBlock>(1);

  cuda::DeviceBuffers& b = r.buffers;
  b.state = r.allocate<cuda::DeviceState>(1);
  b.control = r.control;
  b.pass_counts = r.allocate<std::int32_t>(cuda::kPassCopies * num_layers * num_physical);
  b.window = r.allocate<std::int32_t>(num_slots * num_layers * num_physical);
  b.slot_pass_ids = r.allocate<long long>(num_slots);
  b.slot_versions = r.allocate<unsigned long long>(num_slots);
  b.slot_num_tokens = r.allocate<long long>(num_slots);
  if (mode == RecordMode::kDecayed) {
    b.decayed_physical = r.allocate<double>(num_layers * num_physical);
    b.decayed_logical = r.allocate<double>(num_layers * num_logical);
  }
  r.placement_maps = r.allocate<std::int32_t>(2 * num_layers * num_physical);
  b.placement_maps = r.placement_maps;
  b.num_slots = num_slots;
  b.num_layers = num_layers;
  b.num_physical_experts = num_physical;
  b.num_logical_experts = num_logical;
  // Host counts (DeepEP normal dispatch) reach the device through this buffer; stream order
  // keeps one call's copy from overwriting what an earlier call's kernel still reads.
  r.local_counts = r.allocate<std::int64_t>(model.num_local_experts());
  r.host_local_counts.resize(std::size_t(model.num_local_experts()));
  if (mode == RecordMode::kPerToken) {
    cuda::TraceBuffers& trace = b.trace;
    trace.top_k = model.top_k;
    trace.max_tokens = cuda_options_.max_tokens_per_pass;
    trace.staging = r.allocate<std::int32_t>(trace.max_tokens * num_layers * model.top_k);
    trace.layer_rows = r.allocate<std::int32_t>(num_layers);
    trace.copy_ticket = r.allocate<unsigned int>(1);
    r.drain = std::make_unique<cuda::TraceDrain>(
        cuda_options_.trace_path,
        io::TraceHeader{num_layers, num_logical, num_physical, model.top_k},
        io::TraceWriterOptions{.reserve_bytes = cuda_options_.trace_reserve_bytes,
                               .copy_threads = cuda_options_.trace_copy_threads},
        this->options().per_token_capacity, cuda_options_.max_pending_passes);
    r.drain->describe(trace);
    MOESTAT_CUDA_CHECK(cudaStreamCreateWithFlags(&r.trace_stream, cudaStreamNonBlocking));
    MOESTAT_CUDA_CHECK(cudaEventCreateWithFlags(&r.trace_fork, cudaEventDisableTiming));
    MOESTAT_CUDA_CHECK(cudaEventCreateWithFlags(&r.trace_join, cudaEventDisableTiming));
    layer_traced_.assign(std::size_t(num_layers), 0);
  }

  const Placement trivial = Placement::trivial(num_layers, num_physical, num_logical, 0);
  MOESTAT_CUDA_CHECK(cudaMemcpy(r.placement_maps, trivial.physical_to_logical().data(),
                                trivial.physical_to_logical().size_bytes(),
                                cudaMemcpyHostToDevice));
  placements_.emplace(0, trivial);
  MOESTAT_CUDA_CHECK(cudaDeviceSynchronize());
  if (collected) {
    r.collector =
        std::make_unique<cuda::PassCollector>(b, device_, cuda_options_.pass_collect_interval);
  }
}

CudaRecorder::~CudaRecorder() = default;

void CudaRecorder::require_on_device(const TensorView& view, const char* what) const {
  MOESTAT_CHECK(view.device().kind == DeviceKind::kCuda && view.device().index == device_,
                "{} must be in CUDA memory of device {} (the recorder's device)", what, device_);
}

void CudaRecorder::do_begin_pass(std::int64_t pass_id) {
  std::fill(layer_traced_.begin(), layer_traced_.end(), 0);
  pass_max_rows_ = 0;
  cuda::launch_begin_pass(resources_->buffers, pass_id, stream_);
}

namespace {

cuda::IdMatrix id_matrix(const TensorView& topk_ids) {
  return cuda::IdMatrix{topk_ids.data(),    topk_ids.dtype() == DType::kInt64,
                        topk_ids.size(0),   topk_ids.size(1),
                        topk_ids.stride(0), topk_ids.stride(1)};
}

}  // namespace

void CudaRecorder::launch_topk(std::int64_t layer, const TensorView& topk_ids,
                               const void* device_count, bool count_int64,
                               std::int64_t host_count) {
  require_on_device(topk_ids, "topk_ids");
  const cuda::IdMatrix ids = id_matrix(topk_ids);
  const cuda::ValidCount valid{device_count, count_int64, host_count};
  if (options().mode == RecordMode::kPerToken) {
    MOESTAT_CHECK(!layer_traced_[std::size_t(layer)],
                  "per_token mode on the CUDA recorder takes one record_topk per layer and pass; "
                  "layer {} was already recorded in this pass",
                  layer);
    layer_traced_[std::size_t(layer)] = 1;
    pass_max_rows_ = std::max(pass_max_rows_, topk_ids.size(0));
    cuda::launch_trace_layer(resources_->buffers, layer, ids, valid, stream_);
    return;
  }
  cuda::launch_record_topk(resources_->buffers, layer, ids, valid, stream_);
}

void CudaRecorder::do_record_topk(std::int64_t layer, const TensorView& topk_ids,
                                  std::int64_t num_valid_tokens) {
  launch_topk(layer, topk_ids, nullptr, false, num_valid_tokens);
}

void CudaRecorder::do_record_topk(std::int64_t layer, const TensorView& topk_ids,
                                  const TensorView& num_valid_tokens) {
  require_on_device(num_valid_tokens, "num_valid_tokens");
  launch_topk(layer, topk_ids, num_valid_tokens.data(), num_valid_tokens.dtype() == DType::kInt64,
              topk_ids.size(0));
}

void CudaRecorder::launch_topk_layers(std::span<const LayerTopk> layers, const void* device_count,
                                      bool count_int64, std::int64_t host_count) {
  for (const LayerTopk& entry : layers) require_on_device(entry.topk_ids, "topk_ids");
  if (options().mode == RecordMode::kPerToken) {
    // Traces stage each layer's tokens in order: one launch per layer, as record_topk.
    for (const LayerTopk& entry : layers) {
      launch_topk(entry.layer, entry.topk_ids, device_count, count_int64,
                  host_count == kAllTokens ? entry.topk_ids.size(0) : host_count);
    }
    return;
  }
  std::vector<cuda::LayerIds> batch;
  batch.reserve(layers.size());
  for (const LayerTopk& entry : layers) batch.push_back({entry.layer, id_matrix(entry.topk_ids)});
  // NOTE: every row of every layer is valid when no count is given; the kernels clamp the
  // count to each layer's rows.
  const cuda::ValidCount valid{
      device_count, count_int64,
      host_count == kAllTokens ? std::numeric_limits<std::int64_t>::max() : host_count};
  cuda::launch_record_topk_layers(resources_->buffers, batch, valid, stream_);
}

void CudaRecorder::do_record_topk_layers(std::span<const LayerTopk> layers,
                                         std::int64_t num_valid_tokens) {
  launch_topk_layers(layers, nullptr, false, num_valid_tokens);
}

void CudaRecorder::do_record_topk_layers(std::span<const LayerTopk> layers,
                                         const TensorView& num_valid_tokens) {
  require_on_device(num_valid_tokens, "num_valid_tokens");
  launch_topk_layers(layers, num_valid_tokens.data(), num_valid_tokens.dtype() == DType::kInt64,
                     kAllTokens);
}

void CudaRecorder::do_record_local_counts(std::int64_t layer, const TensorView& counts,
                                          std::int64_t first_physical_expert) {
  const std::int64_t num_local = topology().num_local_experts();
  if (counts.device().kind == DeviceKind::kCpu) {
    // DeepEP normal dispatch hands over a host list (never inside a captured graph). A
    // pageable-to-device async copy is staged by the driver before it returns, so this
    // neither waits for the stream nor keeps a reference to the caller's memory.
    std::vector<std::int64_t>& host = resources_->host_local_counts;
    for (std::int64_t j = 0; j < num_local; ++j) {
      host[std::size_t(j)] = counts.int_at({j});
      MOESTAT_CHECK(host[std::size_t(j)] >= 0, "local counts: entry {} is negative ({})", j,
                    host[std::size_t(j)]);
    }
    MOESTAT_CUDA_CHECK(cudaMemcpyAsync(resources_->local_counts, host.data(),
                                       host.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice,
                                       stream_));
    cuda::launch_record_local_counts(resources_->buffers, layer, resources_->local_counts, true,
                                     num_local, first_physical_expert, stream_);
    return;
  }
  require_on_device(counts, "local counts (masked_m)");
  MOESTAT_CHECK(counts.stride(0) == 1 || counts.size(0) <= 1,
                "local counts must be contiguous, got stride {}", counts.stride(0));
  cuda::launch_record_local_counts(resources_->buffers, layer, counts.data(),
                                   counts.dtype() == DType::kInt64, num_local,
                                   first_physical_expert, stream_);
}

void CudaRecorder::do_abort_pass() {
  std::fill(layer_traced_.begin(), layer_traced_.end(), 0);
  pass_max_rows_ = 0;
  cuda::launch_abort_pass(resources_->buffers, stream_);
}

void CudaRecorder::do_end_pass() {
  const RecordMode mode = options().mode;
  const double decay = mode == RecordMode::kDecayed ? options().decay : -1.0;
  Resources& r = *resources_;
  if (mode != RecordMode::kPerToken) {
    cuda::launch_end_pass(r.buffers, decay, true, stream_);
    return;
  }
  cuda::launch_trace_close(r.buffers, stream_);
  // Fork: the copy to the pinned ring runs on the side stream while the pass is published;
  // join before returning, so a capture that ends after end_pass holds both streams' work
  // and the next pass cannot stage ids over tokens still being copied.
  MOESTAT_CUDA_CHECK(cudaEventRecord(r.trace_fork, stream_));
  MOESTAT_CUDA_CHECK(cudaStreamWaitEvent(r.trace_stream, r.trace_fork, 0));
  cuda::launch_trace_copy(r.buffers, pass_max_rows_, r.trace_stream);
  MOESTAT_CUDA_CHECK(cudaEventRecord(r.trace_join, r.trace_stream));
  cuda::launch_end_pass(r.buffers, decay, false, stream_);
  MOESTAT_CUDA_CHECK(cudaStreamWaitEvent(stream_, r.trace_join, 0));
}

bool CudaRecorder::accepts_hooks_outside_pass() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  MOESTAT_CUDA_CHECK(cudaStreamIsCapturing(stream_, &status));
  if (status != cudaStreamCaptureStatusActive) return false;
  // The host side of a per-token pass (one hook per layer, the rows to copy at end_pass)
  // is tallied between begin_pass and end_pass; hooks captured apart from both escape it.
  MOESTAT_CHECK(options().mode != RecordMode::kPerToken,
                "per_token mode on the CUDA recorder takes hooks only inside a pass, also "
                "while capturing: capture begin_pass and end_pass with them");
  return true;
}

void CudaRecorder::check_engine_layer(std::int64_t layer, const char* caller) const {
  const ModelTopology& model = topology();
  MOESTAT_CHECK(layer >= 0 && layer < model.num_layers, "{}: layer {} out of range [0, {})", caller,
                layer, model.num_layers);
  MOESTAT_CHECK(model.is_moe(layer), "{}: layer {} is a dense layer in the topology", caller,
                layer);
  const RecordMode mode = options().mode;
  MOESTAT_CHECK(
      mode == RecordMode::kStat || mode == RecordMode::kPerPass || mode == RecordMode::kDecayed,
      "{}: {} mode cannot take counts from an engine kernel; use stat, per_pass or decayed", caller,
      record_mode_name(mode));
}

FusedRecordTarget CudaRecorder::fused_target(std::int64_t layer) const {
  check_engine_layer(layer, "fused_target");
  return cuda::layer_target(resources_->buffers, layer);
}

std::int32_t* CudaRecorder::pass_count_row(std::int64_t layer) const {
  check_engine_layer(layer, "pass_count_row");
  // Copy 0 of the layer: the fold sums every copy, and begin_pass clears this one.
  return cuda::layer_target(resources_->buffers, layer).layer_counts;
}

void CudaRecorder::drain_trace() {
  MOESTAT_CHECK(options().mode == RecordMode::kPerToken,
                "drain_trace: the recorder is in {} mode, not per_token",
                record_mode_name(options().mode));
  DeviceGuard guard(device_);
  MOESTAT_CUDA_CHECK(cudaStreamSynchronize(resources_->trace_stream));
  resources_->drain->wait_written();
}

void CudaRecorder::start() {
  std::lock_guard lock(mutex_);
  DeviceGuard guard(device_);
  // Recording first, then the epoch: a pass that sees the flag under the old epoch is
  // discarded by the reset the new epoch triggers.
  resources_->write_control(&cuda::ControlBlock::recording, std::int32_t{1});
  resources_->write_control(&cuda::ControlBlock::epoch, ++requested_epoch_);
  recording_requested_.store(true, std::memory_order_release);
}

void CudaRecorder::stop() {
  std::lock_guard lock(mutex_);
  DeviceGuard guard(device_);
  resources_->write_control(&cuda::ControlBlock::recording, std::int32_t{0});
  recording_requested_.store(false, std::memory_order_release);
}

void CudaRecorder::reset() {
  std::lock_guard lock(mutex_);
  DeviceGuard guard(device_);
  resources_->write_control(&cuda::ControlBlock::epoch, ++requested_epoch_);
}

bool CudaRecorder::is_recording() const {
  return recording_requested_.load(std::memory_order_acquire);
}

void CudaRecorder::set_placement(const Placement& placement) {
  validate_placement(placement);
  std::lock_guard lock(mutex_);
  DeviceGuard guard(device_);
  Resources& r = *resources_;
  const std::uint64_t current_word = r.requested.placement_word;
  const std::uint64_t current = current_word >> 1;
  MOESTAT_CHECK(placement.version() > current && placement.version() < (std::uint64_t{1} << 62),
                "placement version {} must be higher than the current version {} (and below 2^62)",
                placement.version(), current);
  std::uint64_t buffer = current_word & 1;
  if (options().mode == RecordMode::kDecayed) {
    // The end-pass kernel converts with the map its pass latched: write the buffer no pass
    // uses, which is free only once the device has latched the last change.
    cuda::DeviceState state{};
    MOESTAT_CUDA_CHECK(cudaMemcpyAsync(&state, r.buffers.state, sizeof state,
                                       cudaMemcpyDeviceToHost, r.control_stream));
    MOESTAT_CUDA_CHECK(cudaStreamSynchronize(r.control_stream));
    MOESTAT_CHECK(state.placement_version == current,
                  "placement version {} is not yet in use on the device (no pass began since it "
                  "was set); set the next placement after a pass",
                  current);
    buffer = 1 - buffer;
    const std::int64_t map_size = topology().num_layers * topology().num_physical_experts;
    MOESTAT_CUDA_CHECK(cudaMemcpyAsync(
        r.placement_maps + std::int64_t(buffer) * map_size, placement.physical_to_logical().data(),
        placement.physical_to_logical().size_bytes(), cudaMemcpyHostToDevice, r.control_stream));
    MOESTAT_CUDA_CHECK(cudaStreamSynchronize(r.control_stream));
  }
  placements_.emplace(placement.version(), placement);
  r.write_control(&cuda::ControlBlock::placement_word, (placement.version() << 1) | buffer);
}

Snapshot CudaRecorder::snapshot() const {
  std::lock_guard lock(mutex_);
  DeviceGuard guard(device_);
  const Resources& r = *resources_;
  const cuda::DeviceBuffers& b = r.buffers;
  const ModelTopology& model = topology();
  const std::int64_t pass_size = model.num_layers * model.num_physical_experts;
  const std::int64_t window = b.num_slots - 1;

  Snapshot out;
  out.mode = options().mode;
  out.approximate = out.mode == RecordMode::kStatApprox;
  out.num_layers = model.num_layers;
  out.num_logical_experts = model.num_logical_experts;
  out.num_physical_experts = model.num_physical_experts;
  out.top_k = model.top_k;
  if (r.collector != nullptr) {
    cuda::CollectedPasses passes = r.collector->collect();
    // A start or reset that has not reached the device yet: nothing belongs to it.
    if (passes.epoch != requested_epoch_) return out;
    out.pass_ids = std::move(passes.pass_ids);
    out.placement_versions = std::move(passes.placement_versions);
    out.pass_num_tokens = std::move(passes.pass_num_tokens);
    out.physical_counts.assign(passes.physical_counts.begin(), passes.physical_counts.end());
    out.logical_counts =
        detail::logical_counts_by_pass(out.physical_counts, out.placement_versions, placements_);
    out.num_passes = passes.num_passes;
    out.dropped_passes = passes.dropped_passes;
    out.dropped_ids = passes.dropped_ids;
    return out;
  }

  // Sequence lock: read the state, copy, read it again. A window pass is whole if its slot
  // was not reused before the second read; decayed loads need no end-pass in between.
  constexpr int kMaxAttempts = 1000;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    cuda::DeviceState before{}, after{};
    MOESTAT_CUDA_CHECK(
        cudaMemcpyAsync(&before, b.state, sizeof before, cudaMemcpyDeviceToHost, r.control_stream));
    MOESTAT_CUDA_CHECK(cudaStreamSynchronize(r.control_stream));
    if (before.seq % 2 != 0) continue;
    if (before.applied_epoch != requested_epoch_) {
      // A start or reset has not reached the device yet: nothing recorded belongs to it.
      if (out.mode == RecordMode::kDecayed) {
        out.decayed_physical_load.assign(std::size_t(pass_size), 0.0);
        out.decayed_logical_load.assign(std::size_t(model.num_layers * model.num_logical_experts),
                                        0.0);
      }
      return out;
    }
    const long long first = std::max<long long>(before.base, before.cursor - window);
    std::vector<std::int32_t> counts;
    std::vector<long long> pass_ids, num_tokens;
    std::vector<unsigned long long> versions;
    std::vector<double> decayed_physical, decayed_logical;
    if (out.mode == RecordMode::kDecayed) {
      copy_to_host(decayed_physical, b.decayed_physical, pass_size, r.control_stream);
      copy_to_host(decayed_logical, b.decayed_logical, model.num_layers * model.num_logical_experts,
                   r.control_stream);
    } else {
      // Only the slots of kept passes: [first, cursor) in at most two contiguous runs.
      counts.resize(std::size_t((before.cursor - first) * pass_size));
      std::int64_t copied = 0;
      for (long long pass = first; pass < before.cursor;) {
        const long long slot = pass % b.num_slots;
        const long long run = std::min<long long>(before.cursor - pass, b.num_slots - slot);
        MOESTAT_CUDA_CHECK(cudaMemcpyAsync(counts.data() + copied * pass_size,
                                           b.window + slot * pass_size,
                                           std::size_t(run * pass_size) * sizeof(std::int32_t),
                                           cudaMemcpyDeviceToHost, r.control_stream));
        copied += run;
        pass += run;
      }
      copy_to_host(pass_ids, b.slot_pass_ids, b.num_slots, r.control_stream);
      copy_to_host(num_tokens, b.slot_num_tokens, b.num_slots, r.control_stream);
      copy_to_host(versions, b.slot_versions, b.num_slots, r.control_stream);
    }
    MOESTAT_CUDA_CHECK(
        cudaMemcpyAsync(&after, b.state, sizeof after, cudaMemcpyDeviceToHost, r.control_stream));
    MOESTAT_CUDA_CHECK(cudaStreamSynchronize(r.control_stream));

    out.num_passes = before.cursor - before.base;
    out.dropped_ids = std::int64_t(before.dropped_ids);
    out.dropped_tokens = std::int64_t(before.dropped_tokens);
    if (out.mode == RecordMode::kPerToken) {
      if (after.seq != before.seq) continue;
      return out;  // the tokens themselves are in the trace file
    }
    if (out.mode == RecordMode::kDecayed) {
      // Whole only if no fold kernel ran during the copy (each pass folds num_layers blocks).
      const bool quiet = before.fold_blocks == std::uint64_t(model.num_layers * before.cursor) &&
                         after.fold_blocks == before.fold_blocks && after.seq == before.seq;
      if (!quiet) continue;
      out.decayed_physical_load = std::move(decayed_physical);
      out.decayed_logical_load = std::move(decayed_logical);
      return out;
    }
    // Pass n's slot is overwritten by the fold of pass n + window + 1, which runs while the
    // cursor is n + window + 1: the passes from after.cursor - window on were intact.
    const long long intact_from = std::max<long long>(first, after.cursor - window);
    for (long long pass = intact_from; pass < before.cursor; ++pass) {
      const auto slot = std::size_t(pass % b.num_slots);
      out.pass_ids.push_back(pass_ids[slot]);
      out.pass_num_tokens.push_back(num_tokens[slot]);
      out.placement_versions.push_back(versions[slot]);
      const std::int32_t* in = counts.data() + (pass - first) * pass_size;
      out.physical_counts.insert(out.physical_counts.end(), in, in + pass_size);
    }
    out.logical_counts =
        detail::logical_counts_by_pass(out.physical_counts, out.placement_versions, placements_);
    return out;
  }
  MOESTAT_FAIL("snapshot: the device state kept changing over {} attempts", kMaxAttempts);
}

}  // namespace moestat::record
