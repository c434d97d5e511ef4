#include <atomic>
#include <limits>
#include <moestat/record/cuda_recorder.hpp>
#include <vector>

#include "cuda_check.hpp"
#include "device_allocations.hpp"
#include "device_state.cuh"
#include "record_kernels.cuh"
#include "storage_policy.hpp"

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
    cuda_support::throw_cuda_error("cudaGetDeviceCount(&count)", status, __FILE__, __LINE__);
  }
  MOESTAT_CHECK(count > 0,
                "CudaRecorder: no CUDA GPU on this machine; record with CpuRecorder, or run "
                "where a GPU is");
  MOESTAT_CHECK(device < count, "CudaRecorder: device {} does not exist; this machine has {}",
                device,
                count == 1 ? std::string("1 CUDA GPU (device 0)")
                           : fmt::format("{} CUDA GPUs (devices 0 to {})", count, count - 1));
}

}  // namespace

/// Everything allocated at construction and freed at destruction.
struct CudaRecorder::Resources {
  cuda::DeviceBuffers buffers{};
  cuda::ControlBlock* control = nullptr;  // device memory, written by control calls
  cuda::ControlBlock requested{};         // host copy of what control calls last wrote
  cuda_support::DeviceAllocations memory;
  cudaStream_t control_stream = nullptr;  // snapshots and placement uploads
  int32_t* placement_maps = nullptr;
  std::int64_t* local_counts = nullptr;         // [P / ep_size] device copy of host local counts
  std::vector<std::int64_t> host_local_counts;  // [P / ep_size] reused, no allocation per call
  // Where ended passes go, as the mode wants; made last and gone first, as its threads and
  // copies use the buffers above.
  std::unique_ptr<cuda::StoragePolicy> storage;

  /// Writes one field of the device control block and waits for it to land, so the
  /// next pass to begin on the device sees it.
  template <typename T>
  void write_control(T cuda::ControlBlock::*field, T value) {
    requested.*field = value;
    MOESTAT_CUDA_CHECK(cudaMemcpyAsync(&(control->*field), &(requested.*field), sizeof(T),
                                       cudaMemcpyHostToDevice, control_stream));
    MOESTAT_CUDA_CHECK(cudaStreamSynchronize(control_stream));
  }

  ~Resources() {
    storage.reset();
    if (control_stream != nullptr) cudaStreamDestroy(control_stream);
  }
};

CudaRecorder::CudaRecorder(ModelTopology topology, RecorderOptions options, int device,
                           CudaOptions cuda_options)
    : Recorder(std::move(topology), options),
      cuda_options_(std::move(cuda_options)),
      resources_(std::make_unique<Resources>()) {
  const cuda::StorageFactory make_storage = cuda::choose_storage(this->options(), cuda_options_);
  MOESTAT_CHECK(
      cuda_options_.max_tokens_per_pass > 0 && cuda_options_.max_pending_passes > 0,
      "CudaOptions: max_tokens_per_pass ({}) and max_pending_passes ({}) must be positive",
      cuda_options_.max_tokens_per_pass, cuda_options_.max_pending_passes);
  require_usable_device(device);
  if (device < 0) MOESTAT_CUDA_CHECK(cudaGetDevice(&device));
  device_ = device;
  DeviceGuard guard(device_);

  const ModelTopology& model = this->topology();
  const std::int64_t num_layers = model.num_layers;
  const std::int64_t num_physical = model.num_physical_experts;
  const std::int64_t num_logical = model.num_logical_experts;

  Resources& r = *resources_;
  MOESTAT_CUDA_CHECK(cudaStreamCreateWithFlags(&r.control_stream, cudaStreamNonBlocking));
  r.control = r.memory.allocate<cuda::ControlBlock>(1);

  cuda::DeviceBuffers& b = r.buffers;
  b.state = r.memory.allocate<cuda::DeviceState>(1);
  b.control = r.control;
  b.pass_counts = r.memory.allocate<std::int32_t>(cuda::kPassCopies * num_layers * num_physical);
  r.placement_maps = r.memory.allocate<std::int32_t>(2 * num_layers * num_physical);
  b.placement_maps = r.placement_maps;
  b.num_layers = num_layers;
  b.num_physical_experts = num_physical;
  b.num_logical_experts = num_logical;
  // Host counts (DeepEP normal dispatch) reach the device through this buffer; stream order
  // keeps one call's copy from overwriting what an earlier call's kernel still reads.
  r.local_counts = r.memory.allocate<std::int64_t>(model.num_local_experts());
  r.host_local_counts.resize(std::size_t(model.num_local_experts()));
  r.storage = make_storage(cuda::StorageSetup{.buffers = b,
                                              .placement_maps = r.placement_maps,
                                              .control_stream = r.control_stream,
                                              .device = device_,
                                              .topology = model,
                                              .options = this->options(),
                                              .cuda_options = cuda_options_});

  const Placement trivial = Placement::trivial(num_layers, num_physical, num_logical, 0);
  MOESTAT_CUDA_CHECK(cudaMemcpy(r.placement_maps, trivial.physical_to_logical().data(),
                                trivial.physical_to_logical().size_bytes(),
                                cudaMemcpyHostToDevice));
  placements_.emplace(0, trivial);
  MOESTAT_CUDA_CHECK(cudaDeviceSynchronize());
}

CudaRecorder::~CudaRecorder() = default;

void CudaRecorder::require_on_device(const TensorView& view, const char* what) const {
  MOESTAT_CHECK(view.device().kind == DeviceKind::kCuda && view.device().index == device_,
                "{} must be in CUDA memory of device {} (the recorder's device)", what, device_);
}

void CudaRecorder::do_begin_pass(std::int64_t pass_id) {
  resources_->storage->begin_pass(pass_id, stream_);
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
  resources_->storage->record_topk(layer, ids, valid, stream_);
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
  std::vector<cuda::LayerIds> batch;
  batch.reserve(layers.size());
  for (const LayerTopk& entry : layers) batch.push_back({entry.layer, id_matrix(entry.topk_ids)});
  // NOTE: every row of every layer is valid when no count is given; the kernels clamp the
  // count to each layer's rows.
  const cuda::ValidCount valid{
      device_count, count_int64,
      host_count == kAllTokens ? std::numeric_limits<std::int64_t>::max() : host_count};
  resources_->storage->record_topk_layers(batch, valid, stream_);
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

void CudaRecorder::do_abort_pass() { resources_->storage->abort_pass(stream_); }

void CudaRecorder::do_end_pass() { resources_->storage->end_pass(stream_); }

bool CudaRecorder::accepts_hooks_outside_pass() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  MOESTAT_CUDA_CHECK(cudaStreamIsCapturing(stream_, &status));
  if (status != cudaStreamCaptureStatusActive) return false;
  resources_->storage->check_hook_outside_pass();
  return true;
}

void CudaRecorder::check_engine_layer(std::int64_t layer, const char* caller) const {
  const ModelTopology& model = topology();
  MOESTAT_CHECK(layer >= 0 && layer < model.num_layers, "{}: layer {} out of range [0, {})", caller,
                layer, model.num_layers);
  MOESTAT_CHECK(model.is_moe(layer), "{}: layer {} is a dense layer in the topology", caller,
                layer);
  MOESTAT_CHECK(resources_->storage->takes_engine_counts(),
                "{}: {} mode cannot take counts from an engine kernel; use stat, per_pass or "
                "decayed",
                caller, record_mode_name(options().mode));
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
  DeviceGuard guard(device_);
  resources_->storage->drain_trace();
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
  const std::uint64_t buffer = r.storage->map_buffer_for(placement, current_word);
  placements_.emplace(placement.version(), placement);
  r.write_control(&cuda::ControlBlock::placement_word, (placement.version() << 1) | buffer);
}

PassesSince CudaRecorder::empty_passes_since() const {
  const ModelTopology& model = topology();
  PassesSince out;
  out.num_layers = model.num_layers;
  out.num_logical_experts = model.num_logical_experts;
  out.num_physical_experts = model.num_physical_experts;
  // The epoch changes with each start() and reset(), and with nothing else.
  out.generation = requested_epoch_;
  return out;
}

PassesSince CudaRecorder::passes_since(std::uint64_t generation, std::int64_t first_arrival) const {
  std::lock_guard lock(mutex_);
  DeviceGuard guard(device_);
  PassesSince out = empty_passes_since();
  resources_->storage->read_since(out, requested_epoch_,
                                  generation == requested_epoch_ ? first_arrival : 0, placements_);
  return out;
}

GpuLoadsSince CudaRecorder::do_gpu_loads_since(std::uint64_t generation, std::int64_t first_arrival,
                                               std::int64_t num_gpus) const {
  std::lock_guard lock(mutex_);
  DeviceGuard guard(device_);
  return resources_->storage->read_gpu_loads_since(
      empty_passes_since(), requested_epoch_, generation == requested_epoch_ ? first_arrival : 0,
      num_gpus, placements_);
}

Snapshot CudaRecorder::snapshot() const {
  std::lock_guard lock(mutex_);
  DeviceGuard guard(device_);
  const ModelTopology& model = topology();
  Snapshot out;
  out.mode = options().mode;
  out.approximate = out.mode == RecordMode::kStatApprox;
  out.num_layers = model.num_layers;
  out.num_logical_experts = model.num_logical_experts;
  out.num_physical_experts = model.num_physical_experts;
  out.top_k = model.top_k;
  resources_->storage->read(out, requested_epoch_, placements_);
  return out;
}

}  // namespace moestat::record
