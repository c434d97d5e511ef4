#include "pass_collector.hpp"

#include "cuda_check.hpp"

namespace moestat::record::cuda {

PassCollector::PassCollector(const DeviceBuffers& buffers, int device,
                             std::chrono::microseconds interval)
    : reader_(buffers, "pass collector"), device_(device), interval_(interval) {
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
  const std::optional<WindowRead> read =
      reader_.read(stream_, passes_.passes, [this](const DeviceState& state) {
        if (state.applied_epoch != passes_.epoch) {
          // The device applied a start or reset: what was collected belongs to the old data.
          passes_ = CollectedPasses{};
          passes_.epoch = state.applied_epoch;
          collected_until_ = state.base;
        }
        return std::optional<long long>(collected_until_);
      });
  // NOTE: the read always has a first pass to start from, so it always returns.
  passes_.dropped_passes += read->first_intact - collected_until_;
  passes_.num_passes = read->state.cursor - read->state.base;
  passes_.dropped_ids = std::int64_t(read->state.dropped_ids);
  collected_until_ = read->state.cursor;
}

}  // namespace moestat::record::cuda
