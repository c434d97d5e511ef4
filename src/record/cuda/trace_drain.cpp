#include "trace_drain.hpp"

#include <algorithm>
#include <chrono>
#include <span>

#include "cuda_check.hpp"

namespace moestat::record::cuda {
namespace {

template <typename T>
T* pinned_alloc(std::int64_t count) {
  void* pointer = nullptr;
  MOESTAT_CUDA_CHECK(cudaHostAlloc(&pointer, std::size_t(count) * sizeof(T), cudaHostAllocMapped));
  return static_cast<T*>(pointer);
}

template <typename T>
T* device_alias(T* host) {
  void* device = nullptr;
  MOESTAT_CUDA_CHECK(cudaHostGetDevicePointer(&device, host, 0));
  return static_cast<T*>(device);
}

long long load(const long long& field) {
  return std::atomic_ref<const long long>(field).load(std::memory_order_acquire);
}

void store(long long& field, long long value) {
  std::atomic_ref<long long>(field).store(value, std::memory_order_release);
}

}  // namespace

TraceDrain::TraceDrain(const std::filesystem::path& path, const io::TraceHeader& header,
                       const io::TraceWriterOptions& file_options, std::int64_t capacity_tokens,
                       std::int64_t descriptor_capacity)
    : writer_(path, header, file_options),
      capacity_(capacity_tokens),
      descriptor_capacity_(descriptor_capacity),
      token_size_(header.num_layers * header.top_k) {
  try {
    ring_ = pinned_alloc<std::int32_t>(capacity_ * token_size_);
    descriptors_ = pinned_alloc<TraceDescriptor>(descriptor_capacity_);
    cursors_ = pinned_alloc<TraceCursors>(1);
  } catch (...) {
    if (ring_ != nullptr) cudaFreeHost(ring_);
    if (descriptors_ != nullptr) cudaFreeHost(descriptors_);
    throw;
  }
  *cursors_ = TraceCursors{};
  thread_ = std::thread([this] { run(); });
}

TraceDrain::~TraceDrain() {
  stopping_.store(true, std::memory_order_release);
  thread_.join();
  cudaFreeHost(ring_);
  cudaFreeHost(descriptors_);
  cudaFreeHost(cursors_);
}

void TraceDrain::describe(TraceBuffers& trace) const {
  trace.host_ring = device_alias(ring_);
  trace.capacity = capacity_;
  trace.host_descriptors = device_alias(descriptors_);
  trace.descriptor_capacity = descriptor_capacity_;
  trace.cursors = device_alias(cursors_);
}

std::int64_t TraceDrain::write_published() {
  const long long published = load(cursors_->published_descriptors);
  long long consumed = load(cursors_->consumed_descriptors);
  std::int64_t written = 0;
  for (; consumed < published; ++consumed, ++written) {
    const TraceDescriptor& descriptor = descriptors_[consumed % descriptor_capacity_];
    const std::int64_t begin = descriptor.first_token % capacity_;
    const std::int64_t first_part =
        std::min<std::int64_t>(descriptor.num_tokens, capacity_ - begin);
    const std::span<const std::int32_t> first(ring_ + begin * token_size_,
                                              std::size_t(first_part * token_size_));
    const std::span<const std::int32_t> second(
        ring_, std::size_t((descriptor.num_tokens - first_part) * token_size_));
    writer_.append(descriptor.pass_id, descriptor.placement_version, first, second);
    store(cursors_->consumed_tokens, descriptor.first_token + descriptor.num_tokens);
    store(cursors_->consumed_descriptors, consumed + 1);
  }
  return written;
}

void TraceDrain::run() {
  try {
    for (;;) {
      const bool stopping = stopping_.load(std::memory_order_acquire);
      const std::int64_t written = write_published();
      if (written > 0) {
        std::lock_guard lock(mutex_);
        written_.notify_all();
      }
      if (stopping) break;
      // NOTE: polling, because the device cannot signal a host thread from inside a
      // captured graph without a host callback, which would serialise the stream.
      if (written == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  } catch (...) {
    std::lock_guard lock(mutex_);
    error_ = std::current_exception();
    written_.notify_all();
  }
}

void TraceDrain::wait_written() {
  std::unique_lock lock(mutex_);
  written_.wait(lock, [this] {
    return error_ != nullptr ||
           load(cursors_->consumed_descriptors) == load(cursors_->published_descriptors);
  });
  if (error_ != nullptr) std::rethrow_exception(error_);
}

}  // namespace moestat::record::cuda
