#include "pass_collector.hpp"

#include <algorithm>
#include <moestat/error.hpp>

#include "cuda_check.hpp"

namespace moestat::record::cuda {
namespace {

template <typename T>
void copy_from_device(T* host, const T* device, long long count, cudaStream_t stream) {
  if (count == 0) return;
  MOESTAT_CUDA_CHECK(cudaMemcpyAsync(host, device, std::size_t(count) * sizeof(T),
                                     cudaMemcpyDeviceToHost, stream));
}

DeviceState read_state(const DeviceState* device, cudaStream_t stream) {
  DeviceState state{};
  copy_from_device(&state, device, 1, stream);
  MOESTAT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return state;
}

}  // namespace

PassCollector::PassCollector(const DeviceBuffers& buffers, int device,
                             std::chrono::microseconds interval)
    : buffers_(buffers),
      device_(device),
      interval_(interval),
      slot_pass_ids_(static_cast<std::size_t>(buffers.num_slots)),
      slot_num_tokens_(static_cast<std::size_t>(buffers.num_slots)),
      slot_versions_(static_cast<std::size_t>(buffers.num_slots)) {
  MOESTAT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  if (interval_.count() > 0) thread_ = std::thread([this] { run(); });
}

PassCollector::~PassCollector() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  cudaStreamDestroy(stream_);
}

CollectedPasses PassCollector::collect() {
  std::lock_guard lock(mutex_);
  if (error_ != nullptr) std::rethrow_exception(error_);
  collect_locked();
  return passes_;
}

void PassCollector::run() {
  std::unique_lock lock(mutex_);
  try {
    MOESTAT_CUDA_CHECK(cudaSetDevice(device_));
    // The engine may be capturing a graph on another thread in global mode; the copies here
    // touch neither its stream nor its memory, so they must not invalidate that capture.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    MOESTAT_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) collect_locked();
  } catch (...) {
    error_ = std::current_exception();
  }
}

void PassCollector::collect_locked() {
  const long long window = buffers_.num_slots - 1;
  const long long pass_size = buffers_.num_layers * buffers_.num_physical_experts;
  constexpr int kMaxAttempts = 1000;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    const DeviceState before = read_state(buffers_.state, stream_);
    if (before.seq % 2 != 0) continue;
    if (before.applied_epoch != passes_.epoch) {
      // The device applied a start or reset: what was collected belongs to the old data.
      passes_ = CollectedPasses{};
      passes_.epoch = before.applied_epoch;
      collected_until_ = before.base;
    }
    // Slots of passes [first, cursor), in at most two contiguous runs of the ring.
    const long long first = std::max(collected_until_, before.cursor - window);
    ring_counts_.resize(std::size_t((before.cursor - first) * pass_size));
    for (long long pass = first; pass < before.cursor;) {
      const long long slot = pass % buffers_.num_slots;
      const long long run = std::min(before.cursor - pass, buffers_.num_slots - slot);
      copy_from_device(ring_counts_.data() + (pass - first) * pass_size,
                       buffers_.window + slot * pass_size, run * pass_size, stream_);
      pass += run;
    }
    copy_from_device(slot_pass_ids_.data(), buffers_.slot_pass_ids, buffers_.num_slots, stream_);
    copy_from_device(slot_num_tokens_.data(), buffers_.slot_num_tokens, buffers_.num_slots,
                     stream_);
    copy_from_device(slot_versions_.data(), buffers_.slot_versions, buffers_.num_slots, stream_);
    const DeviceState after = read_state(buffers_.state, stream_);
    if (after.applied_epoch != before.applied_epoch) continue;  // the next attempt resets

    // Pass n's slot is rewritten by the end of pass n + window + 1, which runs while the
    // cursor is n + window + 1: passes from after.cursor - window on were intact.
    const long long intact_from = std::max(first, after.cursor - window);
    for (long long pass = intact_from; pass < before.cursor; ++pass) {
      const auto slot = std::size_t(pass % buffers_.num_slots);
      passes_.pass_ids.push_back(slot_pass_ids_[slot]);
      passes_.pass_num_tokens.push_back(slot_num_tokens_[slot]);
      passes_.placement_versions.push_back(slot_versions_[slot]);
      const std::int32_t* in = ring_counts_.data() + (pass - first) * pass_size;
      passes_.physical_counts.insert(passes_.physical_counts.end(), in, in + pass_size);
    }
    passes_.dropped_passes += intact_from - collected_until_;
    passes_.num_passes = before.cursor - before.base;
    passes_.dropped_ids = std::int64_t(before.dropped_ids);
    collected_until_ = before.cursor;
    return;
  }
  MOESTAT_FAIL("pass collector: the device state kept changing over {} attempts", kMaxAttempts);
}

}  // namespace moestat::record::cuda
