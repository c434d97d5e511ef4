#include "collected_storage.hpp"

#include "cuda_check.hpp"

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
  CollectedPasses collected = collector_->collect(0);
  // A start or reset that has not reached the device yet: nothing belongs to it.
  if (collected.epoch != requested_epoch) return;
  assign_pass_rows(out, std::move(collected.passes), placements);
  out.tallies() = collected.tallies();
}

void CollectedStorage::read_since(PassesSince& out, std::uint64_t requested_epoch,
                                  std::int64_t first_arrival,
                                  const std::map<std::uint64_t, Placement>& placements) {
  // Collected passes stay on the host: the passes that arrived are the rows collected.
  CollectedPasses collected = collector_->collect(first_arrival);
  if (collected.epoch != requested_epoch) return;
  check_arrival(first_arrival, collected.num_collected);
  out.first_arrival = first_arrival;
  assign_pass_rows(out, std::move(collected.passes), placements);
  out.tallies() = collected.tallies();
}

}  // namespace moestat::record::cuda
