// The recorder `moestat demo` replays its workload into: the CPU recorder, or the CUDA
// recorder with each layer's ids first copied to the GPU, where an engine's router leaves
// them.
#pragma once

#include <cstdint>
#include <memory>
#include <moestat/recorder.hpp>
#include <string>
#include <vector>

namespace moestat::cli {

class DemoRecorder {
 public:
  /// `device` is "cpu" or "cuda"; moestat::Error when CUDA is not built in or no GPU is there.
  DemoRecorder(const std::string& device, const ModelTopology& topology,
               const RecorderOptions& options);
  ~DemoRecorder();
  DemoRecorder(const DemoRecorder&) = delete;
  DemoRecorder& operator=(const DemoRecorder&) = delete;

  Recorder& recorder() { return *recorder_; }
  /// "CPU" or the GPU's name.
  const std::string& description() const { return description_; }

  /// record_topk of one layer's ids ([rows, top_k], host memory) with `valid` real tokens;
  /// returns the host seconds the hook took (for the CUDA recorder: to enqueue its kernel).
  double record(std::int64_t layer, const std::vector<std::int32_t>& ids, std::int64_t rows,
                std::int64_t top_k, std::int64_t valid);
  /// Waits for the device work, so a snapshot holds every ended pass.
  void finish();

 private:
  struct DeviceIds;

  std::unique_ptr<Recorder> recorder_;
  std::unique_ptr<DeviceIds> device_ids_;  // CUDA only
  std::string description_;
};

}  // namespace moestat::cli
