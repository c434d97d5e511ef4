// Host reads of the recorder's device memory, on a stream of the reader's own (never the
// engine's), and the sequence lock they are taken under: read the state, copy, read the state
// again, and keep only what the device cannot have rewritten in between.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <moestat/pass_rows.hpp>
#include <vector>

#include "cuda_check.hpp"
#include "device_state.cuh"

namespace moestat::record::cuda {

/// Attempts a reader makes while the device keeps rewriting what it reads, before it fails.
constexpr int kMaxStateReads = 1000;

/// Enqueues a copy of `count` elements of device memory to `host` on `stream`.
template <typename T>
void copy_from_device(T* host, const T* device, long long count, cudaStream_t stream) {
  if (count == 0) return;
  MOESTAT_CUDA_CHECK(cudaMemcpyAsync(host, device, std::size_t(count) * sizeof(T),
                                     cudaMemcpyDeviceToHost, stream));
}

/// Enqueues a copy of `count` elements of device memory into `out`, resized to fit.
template <typename T>
void copy_from_device(std::vector<T>& out, const T* device, long long count, cudaStream_t stream) {
  out.resize(std::size_t(count));
  copy_from_device(out.data(), device, count, stream);
}

/// The device state as it is once `stream`'s earlier copies have landed: copies it and waits.
DeviceState read_device_state(const DeviceState* state, cudaStream_t stream);

/// The tallies the device keeps in `state` (passes ended since the reset, dropped ids and
/// tokens); dropped_passes, which only the pass collector knows, is 0.
RecordTallies tallies_of(const DeviceState& state);

/// Throws: `reader` found the device state changing on each of kMaxStateReads attempts.
[[noreturn]] void fail_unsettled_state(const char* reader);

}  // namespace moestat::record::cuda
