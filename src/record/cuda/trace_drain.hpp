// The host side of per-token traces: the pinned ring the device copies passes into, and a
// writer thread that appends them to a trace file and frees ring space for the device.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <moestat/io/trace_file.hpp>
#include <mutex>
#include <thread>

#include "device_state.cuh"

namespace moestat::record::cuda {

class TraceDrain {
 public:
  /// Allocates `capacity_tokens` tokens of pinned, mapped host ring and starts the writer.
  TraceDrain(const std::filesystem::path& path, const io::TraceHeader& header,
             const io::TraceWriterOptions& file_options, std::int64_t capacity_tokens,
             std::int64_t descriptor_capacity);
  /// Writes what the device published, then stops the writer. The caller must have
  /// synchronised the streams that copy into the ring.
  ~TraceDrain();
  TraceDrain(const TraceDrain&) = delete;
  TraceDrain& operator=(const TraceDrain&) = delete;

  /// Fills the host-side fields of `trace` (ring, descriptors, cursors, device aliases).
  void describe(TraceBuffers& trace) const;

  /// Blocks until the writer has written every published pass. Rethrows a writer error.
  void wait_written();

 private:
  void run();
  /// Writes every published descriptor; returns how many it wrote.
  std::int64_t write_published();

  io::TraceWriter writer_;
  std::int64_t capacity_;
  std::int64_t descriptor_capacity_;
  std::int64_t token_size_;
  std::int32_t* ring_ = nullptr;  // pinned host, mapped
  TraceDescriptor* descriptors_ = nullptr;
  TraceCursors* cursors_ = nullptr;

  std::mutex mutex_;
  std::condition_variable written_;
  std::exception_ptr error_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace moestat::record::cuda
