// The host side of per_pass mode and of unbounded windows: a thread that copies ended passes
// out of the device window ring before the ring reuses their slots.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>

#include "device_state.cuh"
#include "device_window_reader.hpp"

namespace moestat::record::cuda {

/// Passes collected from the device since the last reset the device applied. Of the
/// tallies, num_passes counts the passes the device ended, dropped_passes those whose slot was
/// reused before collection; dropped_tokens stays 0 (these modes keep no tokens).
struct CollectedPasses : RecordTallies {
  std::uint64_t epoch = 0;  ///< The device epoch these passes belong to.
  PassRecords passes;
  std::int64_t num_collected = 0;  ///< Passes collected (whether in `passes` or not).
};

/// Keeps every pass the device ends. The device writes pass n into slot n % num_slots of
/// `buffers.window` and never waits; this thread copies the slots of new passes every
/// `interval` on a stream of its own. A pass whose slot was reused before the copy (the
/// engine ended more than num_slots - 1 passes in one interval) is dropped whole and
/// counted, never half-copied.
class PassCollector {
 public:
  /// Starts the thread when `interval` is positive; otherwise passes are collected only by
  /// collect(). `buffers` must outlive the collector.
  PassCollector(const DeviceBuffers& buffers, int device, std::chrono::microseconds interval);
  ~PassCollector();
  PassCollector(const PassCollector&) = delete;
  PassCollector& operator=(const PassCollector&) = delete;

  /// Collects what the device has ended so far and returns a copy of the passes collected
  /// from the `first_pass`-th on (none when fewer were), with every tally. Rethrows an error
  /// of the collector thread.
  CollectedPasses collect(std::int64_t first_pass);

 private:
  void run();
  /// Reads the new passes out of the ring; caller holds mutex_.
  void collect_locked();

  DeviceWindowReader reader_;
  int device_;
  std::chrono::microseconds interval_;
  cudaStream_t stream_ = nullptr;
  long long collected_until_ = 0;  ///< Device cursor up to which passes are collected.

  std::mutex mutex_;
  CollectedPasses passes_;
  std::exception_ptr error_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace moestat::record::cuda
