#include "window_storage.hpp"

namespace moestat::record::cuda {

WindowStorage::WindowStorage(const StorageSetup& setup)
    : StoragePolicy(setup),
      control_stream_(setup.control_stream),
      reader_(setup.buffers, "snapshot"),
      gpu_loads_(setup.buffers, setup.control_stream) {
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
  out.tallies() = tallies_of(read->state);
  assign_pass_rows(out, std::move(passes), placements);
}

namespace {

/// The first pass of a read from arrival `first_arrival` of epoch `requested_epoch`, for
/// DeviceWindowReader: none while that epoch has not reached the device.
auto first_pass_since(std::uint64_t requested_epoch, std::int64_t first_arrival) {
  return [=](const DeviceState& state) {
    if (state.applied_epoch != requested_epoch) return std::optional<long long>();
    // Every pass the device ended reached the ring: arrivals count from the reset's base.
    check_arrival(first_arrival, state.cursor - state.base);
    return std::optional<long long>(state.base + first_arrival);
  };
}

/// The header fields of a PassesSince or GpuLoadsSince from arrival `first_arrival` that
/// `read` found.
template <typename Since>
void set_since_header(Since& out, const WindowRead& read, std::int64_t first_arrival) {
  out.first_arrival = read.first_intact - read.state.base;
  out.missed_passes = out.first_arrival - first_arrival;
  out.tallies() = tallies_of(read.state);
}

}  // namespace

void WindowStorage::read_since(PassesSince& out, std::uint64_t requested_epoch,
                               std::int64_t first_arrival,
                               const std::map<std::uint64_t, Placement>& placements) {
  PassRecords passes;
  const std::optional<WindowRead> read =
      reader_.read(control_stream_, passes, first_pass_since(requested_epoch, first_arrival));
  // A start or reset that has not reached the device yet: no pass of it has arrived.
  if (!read) return;
  set_since_header(out, *read, first_arrival);
  assign_pass_rows(out, std::move(passes), placements);
}

GpuLoadsSince WindowStorage::read_gpu_loads_since(
    PassesSince header, std::uint64_t requested_epoch, std::int64_t first_arrival,
    std::int64_t num_gpus, const std::map<std::uint64_t, Placement>& placements) {
  GpuLoadsSince out = gpu_loads_of(header, num_gpus);  // the header, no pass yet
  const std::optional<WindowRead> read =
      gpu_loads_.read(reader_, out, placements, first_pass_since(requested_epoch, first_arrival));
  if (read) set_since_header(out, *read, first_arrival);
  return out;
}

}  // namespace moestat::record::cuda
