// stat and stat_approx with a bounded window: ended passes stay in a device ring of
// window_size + 1 slots (the open pass folds into a slot of its own, so the ring always holds
// window_size whole passes), and a snapshot copies the kept ones; gpu_loads_since reduces the
// new ones on the device.
#pragma once

#include "device_window_reader.hpp"
#include "storage_policy.hpp"
#include "window_gpu_loads.hpp"

namespace moestat::record::cuda {

class WindowStorage final : public StoragePolicy {
 public:
  explicit WindowStorage(const StorageSetup& setup);

  void end_pass(cudaStream_t stream) override;
  void read(Snapshot& out, std::uint64_t requested_epoch,
            const std::map<std::uint64_t, Placement>& placements) override;
  void read_since(PassesSince& out, std::uint64_t requested_epoch, std::int64_t first_arrival,
                  const std::map<std::uint64_t, Placement>& placements) override;
  /// Reduced on the device: only the result reaches the host.
  GpuLoadsSince read_gpu_loads_since(PassesSince header, std::uint64_t requested_epoch,
                                     std::int64_t first_arrival, std::int64_t num_gpus,
                                     const std::map<std::uint64_t, Placement>& placements) override;

 private:
  DeviceAllocations memory_;
  cudaStream_t control_stream_;
  DeviceWindowReader reader_;
  WindowGpuLoads gpu_loads_;
};

}  // namespace moestat::record::cuda
