// decayed mode: the fold kernel decays the loads and adds each ended pass to them, converting
// to logical experts on the device with the map its pass latched. The ring has one slot (the
// open pass's); a snapshot copies the loads when no fold ran during the copy.
#pragma once

#include "storage_policy.hpp"

namespace moestat::record::cuda {

class DecayedStorage final : public StoragePolicy {
 public:
  explicit DecayedStorage(const StorageSetup& setup);

  void end_pass(cudaStream_t stream) override;
  void read(Snapshot& out, std::uint64_t requested_epoch,
            const std::map<std::uint64_t, Placement>& placements) override;
  /// Uploads the map into the buffer no pass uses, which is free only once the device has
  /// latched the last change: a second change before any pass began is refused.
  std::uint64_t map_buffer_for(const Placement& placement, std::uint64_t current_word) override;

 private:
  DeviceAllocations memory_;
  double decay_;
  cudaStream_t control_stream_;
  std::int32_t* placement_maps_;
};

}  // namespace moestat::record::cuda
