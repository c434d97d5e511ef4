// per_token mode: each layer's ids are staged on the device (token_staging.hpp); end_pass
// reserves room in the pinned host ring, forks a side stream that copies the pass there and
// joins it, and a writer thread appends the ring to the trace file (trace_drain.hpp). The
// ring of counts has one slot (the open pass's); a snapshot holds only the tallies.
#pragma once

#include <memory>

#include "cuda_handles.hpp"
#include "storage_policy.hpp"
#include "token_staging.hpp"
#include "trace_drain.hpp"

namespace moestat::record::cuda {

using cuda_support::OwnedEvent;
using cuda_support::OwnedStream;

class TraceStorage final : public StoragePolicy {
 public:
  explicit TraceStorage(const StorageSetup& setup);
  /// Waits for the side stream's copies, then lets the writer write what they published.
  ~TraceStorage() override;

  void begin_pass(std::int64_t pass_id, cudaStream_t stream) override;
  void end_pass(cudaStream_t stream) override;
  void abort_pass(cudaStream_t stream) override;
  void read(Snapshot& out, std::uint64_t requested_epoch,
            const std::map<std::uint64_t, Placement>& placements) override;
  /// Call once the engine's stream has run the passes to drain.
  void drain_trace() override;

 private:
  DeviceAllocations memory_;
  cudaStream_t control_stream_;
  TokenStaging staging_;
  std::unique_ptr<TraceDrain> drain_;
  // The side stream that copies passes to the host ring, and its fork and join events.
  OwnedStream copy_stream_;
  OwnedEvent fork_;
  OwnedEvent join_;
};

}  // namespace moestat::record::cuda
