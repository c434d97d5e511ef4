// stat and stat_approx with a bounded window: ended passes stay in a device ring of
// window_size + 1 slots (the open pass folds into a slot of its own, so the ring always holds
// window_size whole passes), and a snapshot copies the kept ones.
#pragma once

#include "device_window_reader.hpp"
#include "storage_policy.hpp"

namespace moestat::record::cuda {

class WindowStorage final : public StoragePolicy {
 public:
  explicit WindowStorage(const StorageSetup& setup);

  void end_pass(cudaStream_t stream) override;
  void read(Snapshot& out, std::uint64_t requested_epoch,
            const std::map<std::uint64_t, Placement>& placements) override;
  void read_since(PassesSince& out, std::uint64_t requested_epoch, std::int64_t first_arrival,
                  const std::map<std::uint64_t, Placement>& placements) override;

 private:
  DeviceAllocations memory_;
  cudaStream_t control_stream_;
  DeviceWindowReader reader_;
};

}  // namespace moestat::record::cuda
