#include "pass_collector.hpp"

#include <algorithm>

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

CollectedPasses PassCollector::collect(std::int64_t first_pass) {
  std::lock_guard lock(mutex_);
  if (error_ != nullptr) std::rethrow_exception(error_);
  collect_locked();
  const PassRecords& all = passes_.passes;
  const auto total = std::int64_t(all.pass_ids.size());
  const auto first = std::size_t(std::clamp<std::int64_t>(first_pass, 0, total));
  const std::size_t pass_size = total == 0 ? 0 : all.physical_counts.size() / std::size_t(total);
  CollectedPasses out;
  out.epoch = passes_.epoch;
  out.num_collected = total;
  out.tallies() = passes_.tallies();
  out.passes.pass_rows() = all.slice(std::int64_t(first), total);
  out.passes.physical_counts.assign(all.physical_counts.begin() + std::ptrdiff_t(first * pass_size),
                                    all.physical_counts.end());
  return out;
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
  const RecordTallies device = tallies_of(read->state);
  passes_.num_passes = device.num_passes;
  passes_.dropped_ids = device.dropped_ids;
  collected_until_ = read->state.cursor;
}

}  // namespace moestat::record::cuda
