// Recorder::gpu_loads_since for the device window ring: the passes asked for are copied out of
// the ring on the device under the ring's sequence lock, the whole ones reduced there
// (gpu_loads_kernels.cu), and only the result copied to the host: [n, L, G] loads, [n]
// balancedness and one [L, P] sum per placement version, never the passes' [n, L, P] rows.
//
// Why copy, then reduce: the sequence lock says which passes are whole only after the copy,
// and it may drop the oldest ones. Loads per pass could drop them afterwards, a sum over the
// passes could not; so the rows are first copied into a private device buffer and reduced once
// the whole ones are known.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <moestat/gpu_loads.hpp>
#include <moestat/placement.hpp>
#include <optional>
#include <vector>

#include "device_state.cuh"
#include "device_window_reader.hpp"

namespace moestat::record::cuda {

/// Device memory that grows on demand in the order of one stream (cudaMallocAsync and
/// cudaFreeAsync), so growing it waits for no other stream and never for the device.
class StreamOrderedBuffer {
 public:
  explicit StreamOrderedBuffer(cudaStream_t stream) : stream_(stream) {}
  ~StreamOrderedBuffer();
  StreamOrderedBuffer(const StreamOrderedBuffer&) = delete;
  StreamOrderedBuffer& operator=(const StreamOrderedBuffer&) = delete;

  /// At least `bytes` bytes, usable by work enqueued on the stream from now on; what the
  /// buffer held is lost when it grows.
  void* reserve(std::size_t bytes);

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
};

/// gpu_loads_since of one window ring, with the device scratch it reduces in.
class WindowGpuLoads {
 public:
  /// Reads the ring of `buffers` (both outliving this object) on `stream`, the recorder's
  /// control stream, never the recording one.
  WindowGpuLoads(const DeviceBuffers& buffers, cudaStream_t stream);

  /// Reads the whole passes from the first one `first_wanted(state)` names (as
  /// DeviceWindowReader::read) with `reader`, and fills the passes of `out` (its header,
  /// num_gpus and zeroed logical_totals already set): ids, versions, tokens, GPU loads,
  /// balancedness and logical totals, under `placements` (every version a pass may have).
  /// Returns what the read found; nullopt (and `out` untouched) where `first_wanted` read none.
  template <typename FirstWanted>
  std::optional<WindowRead> read(DeviceWindowReader& reader, GpuLoadsSince& out,
                                 const std::map<std::uint64_t, Placement>& placements,
                                 FirstWanted&& first_wanted) {
    PassRecords passes;
    // NOTE: allocated at the first read (outside any pass: reads come from control threads),
    // not with the recorder, so recorders nobody follows do not pay for a second ring.
    auto* rows = static_cast<std::int32_t*>(staging_.reserve(ring_rows_bytes()));
    std::optional<WindowRead> found = reader.read_on_device(stream_, passes, rows, first_wanted);
    if (found) {
      reduce(rows + (found->first_intact - found->first_copied) * pass_size(), passes, out,
             placements);
    }
    return found;
  }

 private:
  std::int64_t pass_size() const { return buffers_.num_layers * buffers_.num_physical_experts; }
  std::size_t ring_rows_bytes() const;
  /// Reduces the passes whose rows start at `rows` on the device into `out`.
  void reduce(const std::int32_t* rows, PassRecords& passes, GpuLoadsSince& out,
              const std::map<std::uint64_t, Placement>& placements);

  const DeviceBuffers& buffers_;
  cudaStream_t stream_;
  StreamOrderedBuffer staging_;  ///< [num_slots - 1, L, P] int32: the rows a read copies.
  /// The kernels' outputs, then their inputs (run starts): int64 and double, 8 bytes each.
  StreamOrderedBuffer results_;
  std::vector<std::int64_t> host_results_;  ///< The outputs' copy, kept so reads reuse it.
};

}  // namespace moestat::record::cuda
