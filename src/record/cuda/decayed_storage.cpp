#include "decayed_storage.hpp"

#include <moestat/error.hpp>

#include "device_reads.hpp"

namespace moestat::record::cuda {

DecayedStorage::DecayedStorage(const StorageSetup& setup)
    : StoragePolicy(setup),
      decay_(setup.options.decay),
      control_stream_(setup.control_stream),
      placement_maps_(setup.placement_maps) {
  allocate_ring(setup, memory_, 1);
  DeviceBuffers& b = setup.buffers;
  b.decayed_physical = memory_.allocate<double>(b.num_layers * b.num_physical_experts);
  b.decayed_logical = memory_.allocate<double>(b.num_layers * b.num_logical_experts);
}

void DecayedStorage::end_pass(cudaStream_t stream) {
  launch_end_pass(buffers_, decay_, true, stream);
}

void DecayedStorage::read(Snapshot& out, std::uint64_t requested_epoch,
                          const std::map<std::uint64_t, Placement>& /*placements*/) {
  const DeviceBuffers& b = buffers_;
  const std::int64_t physical_size = b.num_layers * b.num_physical_experts;
  const std::int64_t logical_size = b.num_layers * b.num_logical_experts;
  std::vector<double> physical, logical;
  for (int attempt = 0; attempt < kMaxStateReads; ++attempt) {
    const DeviceState before = read_device_state(b.state, control_stream_);
    if (before.seq % 2 != 0) continue;
    if (before.applied_epoch != requested_epoch) {
      // A start or reset has not reached the device yet: nothing recorded belongs to it.
      out.decayed_physical_load.assign(std::size_t(physical_size), 0.0);
      out.decayed_logical_load.assign(std::size_t(logical_size), 0.0);
      return;
    }
    copy_from_device(physical, b.decayed_physical, physical_size, control_stream_);
    copy_from_device(logical, b.decayed_logical, logical_size, control_stream_);
    const DeviceState after = read_device_state(b.state, control_stream_);
    // Whole only if no fold kernel ran during the copy (each pass folds num_layers blocks).
    const bool quiet = before.fold_blocks == std::uint64_t(b.num_layers * before.cursor) &&
                       after.fold_blocks == before.fold_blocks && after.seq == before.seq;
    if (!quiet) continue;
    out.tallies() = tallies_of(before);
    out.decayed_physical_load = std::move(physical);
    out.decayed_logical_load = std::move(logical);
    return;
  }
  fail_unsettled_state("snapshot");
}

std::uint64_t DecayedStorage::map_buffer_for(const Placement& placement,
                                             std::uint64_t current_word) {
  const std::uint64_t current = current_word >> 1;
  const DeviceState state = read_device_state(buffers_.state, control_stream_);
  MOESTAT_CHECK(state.placement_version == current,
                "placement version {} is not yet in use on the device (no pass began since it "
                "was set); set the next placement after a pass",
                current);
  const std::uint64_t buffer = 1 - (current_word & 1);
  const std::int64_t map_size = buffers_.num_layers * buffers_.num_physical_experts;
  MOESTAT_CUDA_CHECK(cudaMemcpyAsync(
      placement_maps_ + std::int64_t(buffer) * map_size, placement.physical_to_logical().data(),
      placement.physical_to_logical().size_bytes(), cudaMemcpyHostToDevice, control_stream_));
  MOESTAT_CUDA_CHECK(cudaStreamSynchronize(control_stream_));
  return buffer;
}

}  // namespace moestat::record::cuda
