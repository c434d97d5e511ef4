// per_pass mode and unbounded windows: every ended pass is kept on the host. The device
// folds passes into a ring of pass_ring_size + 1 slots that the collector thread empties
// (pass_collector.hpp); a snapshot collects what is new and returns everything collected.
#pragma once

#include <memory>

#include "pass_collector.hpp"
#include "storage_policy.hpp"

namespace moestat::record::cuda {

class CollectedStorage final : public StoragePolicy {
 public:
  explicit CollectedStorage(const StorageSetup& setup);

  void end_pass(cudaStream_t stream) override;
  void read(Snapshot& out, std::uint64_t requested_epoch,
            const std::map<std::uint64_t, Placement>& placements) override;
  void read_since(PassesSince& out, std::uint64_t requested_epoch, std::int64_t first_arrival,
                  const std::map<std::uint64_t, Placement>& placements) override;

 private:
  DeviceAllocations memory_;
  // Last, so its thread stops before the ring it reads is freed.
  std::unique_ptr<PassCollector> collector_;
};

}  // namespace moestat::record::cuda
