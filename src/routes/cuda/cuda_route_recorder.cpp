// CudaRouteRecorder: device buffers allocated once, the pinned ring the row moves of each
// pass go through, and the reads of rows for take() on a stream of their own.
#include <algorithm>
#include <moestat/error.hpp>
#include <moestat/routes/cuda_route_recorder.hpp>
#include <mutex>
#include <vector>

#include "cuda_check.hpp"
#include "cuda_handles.hpp"
#include "device_allocations.hpp"
#include "route_kernels.cuh"

namespace moestat::routes {

namespace {

using cuda_support::DeviceAllocations;
using cuda_support::OwnedEvent;
using cuda_support::OwnedStream;

/// Pinned host memory, freed with the object.
template <typename T>
class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::int64_t count) {
    MOESTAT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_),
                                      std::size_t(std::max<std::int64_t>(count, 1)) * sizeof(T)));
  }
  ~PinnedBuffer() { cudaFreeHost(data_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  T* get() const noexcept { return data_; }

 private:
  T* data_ = nullptr;
};

// Rows one read of take() moves at a time.
constexpr std::int64_t kReadChunkRows = 4096;

}  // namespace

struct CudaRouteRecorder::Device {
  Device(const RouteLayout& layout, const ModelTopology& topology,
         const RouteRecorderOptions& options)
      : row_bytes(layout.num_columns() * layout.top_k *
                  std::int64_t(dtype_size(layout.id_dtype()))),
        num_columns(layout.num_columns()),
        max_moves(options.max_tokens_per_pass),
        read_chunk(std::min(kReadChunkRows, options.capacity_tokens)),
        move_slots(kMoveSlots * 2 * options.max_tokens_per_pass),
        placement(layout.num_columns() * topology.num_physical_experts),
        read_rows(read_chunk),
        read_ids(read_chunk * row_bytes),
        read_valid(read_chunk * layout.num_columns()) {
    const std::int64_t rows = options.max_tokens_per_pass;
    buffers.scratch_ids = allocations.allocate<unsigned char>(rows * row_bytes);
    buffers.scratch_stamps = allocations.allocate<unsigned>(rows * num_columns);
    buffers.scratch_invalid = allocations.allocate<unsigned>(rows * num_columns);
    buffers.pass_stamp = allocations.allocate<unsigned>(1);
    const unsigned first_stamp = 1;
    MOESTAT_CUDA_CHECK(
        cudaMemcpy(buffers.pass_stamp, &first_stamp, sizeof first_stamp, cudaMemcpyHostToDevice));
    buffers.ids = allocations.allocate<unsigned char>(options.capacity_tokens * row_bytes);
    buffers.valid = allocations.allocate<unsigned char>(options.capacity_tokens * num_columns);
    physical_to_logical =
        allocations.allocate<int>(layout.num_columns() * topology.num_physical_experts);
    buffers.physical_to_logical = physical_to_logical;
    buffers.tallies = allocations.allocate<unsigned long long>(2);
    buffers.num_columns = int(layout.num_columns());
    buffers.top_k = int(layout.top_k);
    buffers.id_bytes = int(dtype_size(layout.id_dtype()));
    buffers.num_physical = int(topology.num_physical_experts);
    device_moves = allocations.allocate<int>(2 * rows);
    device_read_rows = allocations.allocate<int>(read_chunk);
    device_read_ids = allocations.allocate<unsigned char>(read_chunk * row_bytes);
    device_read_valid = allocations.allocate<unsigned char>(read_chunk * num_columns);
  }

  std::int64_t row_bytes;
  std::int64_t num_columns;
  std::int64_t max_moves;
  std::int64_t read_chunk;
  DeviceAllocations allocations;
  cuda::RouteBuffers buffers{};
  int* physical_to_logical = nullptr;
  int* device_moves = nullptr;

  // end_pass: slot s of the ring holds a pass's moves until move_copied[s] has fired.
  PinnedBuffer<int> move_slots;
  OwnedEvent move_copied[kMoveSlots];
  bool move_slot_used[kMoveSlots] = {};
  int next_move_slot = 0;

  // set_placement keeps the map here; the next begin_pass copies it on the recording stream.
  PinnedBuffer<int> placement;
  OwnedEvent placement_copied;
  bool placement_used = false;
  std::vector<std::int32_t> next_placement;

  OwnedEvent pass_ended;  // recorded by end_pass; take() waits for it

  // take(): its own stream and buffers, under their own lock.
  std::mutex read_mutex;
  OwnedStream read_stream;
  int* device_read_rows = nullptr;
  unsigned char* device_read_ids = nullptr;
  unsigned char* device_read_valid = nullptr;
  PinnedBuffer<int> read_rows;
  PinnedBuffer<unsigned char> read_ids;
  PinnedBuffer<unsigned char> read_valid;
};

CudaRouteRecorder::CudaRouteRecorder(ModelTopology topology, RouteRecorderOptions options)
    : RouteRecorder(std::move(topology), options) {
  MOESTAT_CHECK(layout().top_k <= cuda::kMaxTopK,
                "route recorder: CudaRouteRecorder takes top_k up to {}, the model has {}",
                cuda::kMaxTopK, layout().top_k);
  device_ = std::make_unique<Device>(layout(), this->topology(), this->options());
  set_placement(Placement::trivial(this->topology().num_layers,
                                   this->topology().num_physical_experts,
                                   this->topology().num_logical_experts));
}

CudaRouteRecorder::~CudaRouteRecorder() {
  // Work of this recorder may still be queued: the buffers it uses must outlive it.
  if (device_) cudaDeviceSynchronize();
}

bool CudaRouteRecorder::accepts_hooks_outside_pass() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream_, &status) == cudaSuccess &&
         status == cudaStreamCaptureStatusActive;
}

void CudaRouteRecorder::check_pass_control(const char* call) const {
  MOESTAT_CHECK(!accepts_hooks_outside_pass(),
                "route recorder: {} while its stream is being captured; call it on the host "
                "around each replay of the graph",
                call);
}

void CudaRouteRecorder::do_begin_pass() {
  Device& device = *device_;
  if (device.next_placement.empty()) return;
  if (device.placement_used) {
    MOESTAT_CUDA_CHECK(cudaEventSynchronize(device.placement_copied.get()));
  }
  std::copy(device.next_placement.begin(), device.next_placement.end(), device.placement.get());
  MOESTAT_CUDA_CHECK(cudaMemcpyAsync(device.physical_to_logical, device.placement.get(),
                                     device.next_placement.size() * sizeof(int),
                                     cudaMemcpyHostToDevice, stream_));
  MOESTAT_CUDA_CHECK(cudaEventRecord(device.placement_copied.get(), stream_));
  device.placement_used = true;
  device.next_placement.clear();
}

void CudaRouteRecorder::do_record(std::span<const ColumnIds> layers) {
  std::vector<cuda::LayerRoutes> launch;
  launch.reserve(layers.size());
  std::int64_t max_rows = 0;
  for (const ColumnIds& layer : layers) {
    MOESTAT_CHECK(layer.topk_ids.device().kind == DeviceKind::kCuda,
                  "route recorder: CudaRouteRecorder takes top-k ids in CUDA device memory");
    launch.push_back({layer.topk_ids.data(), layer.topk_ids.dtype() == DType::kInt64,
                      int(layer.column), layer.topk_ids.size(0), layer.topk_ids.stride(0),
                      layer.topk_ids.stride(1)});
    max_rows = std::max(max_rows, layer.topk_ids.size(0));
  }
  cuda::launch_record_routes(device_->buffers, launch, max_rows, stream_);
}

void CudaRouteRecorder::do_end_pass(std::span<const RowMove> moves) {
  Device& device = *device_;
  if (moves.size() <= std::size_t(cuda::kInlineMoves)) {
    // A decode batch's moves go in the kernel's parameters: no copy, no ring slot.
    cuda::InlineMoves inline_moves;
    for (std::size_t i = 0; i < moves.size(); ++i) {
      inline_moves.pairs[2 * i] = moves[i].batch_row;
      inline_moves.pairs[2 * i + 1] = moves[i].store_row;
    }
    cuda::launch_end_pass(device.buffers, nullptr, inline_moves, std::int64_t(moves.size()),
                          stream_);
    MOESTAT_CUDA_CHECK(cudaEventRecord(device.pass_ended.get(), stream_));
    return;
  }
  const int slot = device.next_move_slot;
  device.next_move_slot = (slot + 1) % kMoveSlots;
  // Only when the host is kMoveSlots passes ahead of the GPU does this wait.
  if (device.move_slot_used[slot]) {
    MOESTAT_CUDA_CHECK(cudaEventSynchronize(device.move_copied[slot].get()));
  }
  int* pairs = device.move_slots.get() + std::int64_t(slot) * 2 * device.max_moves;
  for (std::size_t i = 0; i < moves.size(); ++i) {
    pairs[2 * i] = moves[i].batch_row;
    pairs[2 * i + 1] = moves[i].store_row;
  }
  if (!moves.empty()) {
    MOESTAT_CUDA_CHECK(cudaMemcpyAsync(device.device_moves, pairs, moves.size() * 2 * sizeof(int),
                                       cudaMemcpyHostToDevice, stream_));
  }
  MOESTAT_CUDA_CHECK(cudaEventRecord(device.move_copied[slot].get(), stream_));
  device.move_slot_used[slot] = true;
  cuda::launch_end_pass(device.buffers, device.device_moves, cuda::InlineMoves{},
                        std::int64_t(moves.size()), stream_);
  MOESTAT_CUDA_CHECK(cudaEventRecord(device.pass_ended.get(), stream_));
}

void CudaRouteRecorder::do_abort_pass() {
  // No moves: only the stamp advances, so what the pass wrote is never read.
  cuda::launch_end_pass(device_->buffers, nullptr, cuda::InlineMoves{}, 0, stream_);
  MOESTAT_CUDA_CHECK(cudaEventRecord(device_->pass_ended.get(), stream_));
}

void CudaRouteRecorder::do_read_rows(std::span<const std::int32_t> rows,
                                     std::span<const ReadTarget> targets) {
  Device& device = *device_;
  std::lock_guard lock(device.read_mutex);
  const cudaStream_t read = device.read_stream.get();
  MOESTAT_CUDA_CHECK(cudaStreamWaitEvent(read, device.pass_ended.get(), 0));
  for (std::size_t first = 0; first < rows.size(); first += std::size_t(device.read_chunk)) {
    const std::size_t count = std::min(rows.size() - first, std::size_t(device.read_chunk));
    std::copy_n(rows.begin() + std::ptrdiff_t(first), count, device.read_rows.get());
    MOESTAT_CUDA_CHECK(cudaMemcpyAsync(device.device_read_rows, device.read_rows.get(),
                                       count * sizeof(int), cudaMemcpyHostToDevice, read));
    cuda::launch_gather_rows(device.buffers, device.device_read_rows, std::int64_t(count),
                             device.device_read_ids, device.device_read_valid, read);
    MOESTAT_CUDA_CHECK(cudaMemcpyAsync(device.read_ids.get(), device.device_read_ids,
                                       count * std::size_t(device.row_bytes),
                                       cudaMemcpyDeviceToHost, read));
    MOESTAT_CUDA_CHECK(cudaMemcpyAsync(device.read_valid.get(), device.device_read_valid,
                                       count * std::size_t(device.num_columns),
                                       cudaMemcpyDeviceToHost, read));
    MOESTAT_CUDA_CHECK(cudaStreamSynchronize(read));
    copy_to_targets(targets, first, count,
                    reinterpret_cast<const std::byte*>(device.read_ids.get()),
                    reinterpret_cast<const std::byte*>(device.read_valid.get()));
  }
}

void CudaRouteRecorder::do_set_placement(std::span<const std::int32_t> physical_to_logical) {
  // Copied on the recording stream by the next begin_pass, so passes see one map throughout.
  device_->next_placement.assign(physical_to_logical.begin(), physical_to_logical.end());
}

RouteRecorder::BackendTallies CudaRouteRecorder::do_backend_tallies() const {
  unsigned long long tallies[2] = {0, 0};
  // A small synchronous read, on the control path only.
  MOESTAT_CUDA_CHECK(
      cudaMemcpy(tallies, device_->buffers.tallies, sizeof tallies, cudaMemcpyDeviceToHost));
  return {std::int64_t(tallies[0]), std::int64_t(tallies[1])};
}

}  // namespace moestat::routes
