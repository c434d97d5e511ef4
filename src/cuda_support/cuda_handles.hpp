// Owned CUDA streams and events, so a part of the recorder that fails halfway through its
// construction leaves none behind.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda_check.hpp"

namespace moestat::cuda_support {

/// A stream that does not synchronise with the legacy default stream.
class OwnedStream {
 public:
  OwnedStream() { MOESTAT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~OwnedStream() { cudaStreamDestroy(stream_); }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;

  cudaStream_t get() const noexcept { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

/// An event for ordering streams only (no timing).
class OwnedEvent {
 public:
  OwnedEvent() { MOESTAT_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~OwnedEvent() { cudaEventDestroy(event_); }
  OwnedEvent(const OwnedEvent&) = delete;
  OwnedEvent& operator=(const OwnedEvent&) = delete;

  cudaEvent_t get() const noexcept { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace moestat::cuda_support
