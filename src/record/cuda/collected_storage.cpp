#include "collected_storage.hpp"

#include "cuda_check.hpp"
#include "logical_counts.hpp"

namespace moestat::record::cuda {

CollectedStorage::CollectedStorage(const StorageSetup& setup) : StoragePolicy(setup) {
  allocate_ring(setup, memory_, setup.cuda_options.pass_ring_size + 1);
  // The collector thread reads the state and the ring from its own stream as soon as it
  // starts: their zeroing must have landed.
  MOESTAT_CUDA_CHECK(cudaDeviceSynchronize());
  collector_ = std::make_unique<PassCollector>(setup.buffers, setup.device,
                                               setup.cuda_options.pass_collect_interval);
}

void CollectedStorage::end_pass(cudaStream_t stream) {
  launch_end_pass(buffers_, kNoDecay, true, stream);
}

void CollectedStorage::read(Snapshot& out, std::uint64_t requested_epoch,
                            const std::map<std::uint64_t, Placement>& placements) {
  CollectedPasses collected = collector_->collect();
  // A start or reset that has not reached the device yet: nothing belongs to it.
  if (collected.epoch != requested_epoch) return;
  out.pass_ids = std::move(collected.passes.pass_ids);
  out.placement_versions = std::move(collected.passes.placement_versions);
  out.pass_num_tokens = std::move(collected.passes.pass_num_tokens);
  out.physical_counts.assign(collected.passes.physical_counts.begin(),
                             collected.passes.physical_counts.end());
  out.logical_counts =
      detail::logical_counts_by_pass(out.physical_counts, out.placement_versions, placements);
  out.num_passes = collected.num_passes;
  out.dropped_passes = collected.dropped_passes;
  out.dropped_ids = collected.dropped_ids;
}

}  // namespace moestat::record::cuda
