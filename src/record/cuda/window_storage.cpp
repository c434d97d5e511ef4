#include "window_storage.hpp"

#include "logical_counts.hpp"

namespace moestat::record::cuda {

WindowStorage::WindowStorage(const StorageSetup& setup)
    : StoragePolicy(setup),
      control_stream_(setup.control_stream),
      reader_(setup.buffers, "snapshot") {
  allocate_ring(setup, memory_, setup.options.window_size + 1);
}

void WindowStorage::end_pass(cudaStream_t stream) {
  launch_end_pass(buffers_, kNoDecay, true, stream);
}

void WindowStorage::read(Snapshot& out, std::uint64_t requested_epoch,
                         const std::map<std::uint64_t, Placement>& placements) {
  PassRecords passes;
  const std::optional<WindowRead> read =
      reader_.read(control_stream_, passes, [&](const DeviceState& state) {
        // A start or reset has not reached the device yet: nothing recorded belongs to it.
        return state.applied_epoch == requested_epoch ? std::optional<long long>(state.base)
                                                      : std::nullopt;
      });
  if (!read) return;
  out.num_passes = read->state.cursor - read->state.base;
  out.dropped_ids = std::int64_t(read->state.dropped_ids);
  out.dropped_tokens = std::int64_t(read->state.dropped_tokens);
  out.pass_ids = std::move(passes.pass_ids);
  out.pass_num_tokens = std::move(passes.pass_num_tokens);
  out.placement_versions = std::move(passes.placement_versions);
  out.physical_counts.assign(passes.physical_counts.begin(), passes.physical_counts.end());
  out.logical_counts =
      detail::logical_counts_by_pass(out.physical_counts, out.placement_versions, placements);
}

}  // namespace moestat::record::cuda
