// How a family of record modes keeps ended passes and reads them back: the window ring (stat,
// stat_approx), collected passes (per_pass, unbounded windows), decayed loads (decayed) or a
// trace file (per_token). A policy owns its device buffers and host threads, its end-of-pass
// launches, its abort handling and its read into a Snapshot; the recorder picks one at
// construction (choose_storage, the one place a mode maps to its storage) and does not branch
// on the mode again.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <moestat/gpu_loads.hpp>
#include <moestat/placement.hpp>
#include <moestat/record/cuda_recorder.hpp>
#include <moestat/snapshot.hpp>
#include <span>

#include "device_allocations.hpp"
#include "device_state.cuh"
#include "device_window_reader.hpp"
#include "logical_counts.hpp"
#include "record_kernels.cuh"

namespace moestat::record::cuda {

using cuda_support::DeviceAllocations;

class TokenStaging;

/// The decay launch_end_pass takes where no decayed loads are kept.
constexpr double kNoDecay = -1.0;

/// What a policy is made from. Its lifetime is the construction's; `buffers` (which the
/// policy keeps a reference to) lives as long as the recorder.
struct StorageSetup {
  /// Control block, state, pass copies and placement maps filled in; the policy fills the
  /// window ring and its own buffers.
  DeviceBuffers& buffers;
  std::int32_t* placement_maps;  ///< [2, L, P] the buffers' maps, writable.
  cudaStream_t control_stream;   ///< The recorder's stream for snapshots and control copies.
  int device;
  const ModelTopology& topology;
  const RecorderOptions& options;
  const CudaOptions& cuda_options;
};

/// Every call comes with the recorder's device current. Hooks (record_topk*, begin_pass,
/// end_pass, abort_pass) come from the forward thread and only enqueue work on the stream
/// given: no host synchronisation or allocation, so they can be captured. read and
/// map_buffer_for come under the recorder's control mutex.
class StoragePolicy {
 public:
  virtual ~StoragePolicy() = default;
  StoragePolicy(const StoragePolicy&) = delete;
  StoragePolicy& operator=(const StoragePolicy&) = delete;

  // Per-layer hooks, in every MoE layer of every pass: not virtual.

  /// Counts `ids` into layer `layer` of the open pass, or stages them whole where the
  /// policy keeps tokens.
  void record_topk(std::int64_t layer, const IdMatrix& ids, const ValidCount& valid,
                   cudaStream_t stream);
  /// As record_topk for each layer; `valid` applies to every layer (clamped to its rows).
  void record_topk_layers(std::span<const LayerIds> layers, const ValidCount& valid,
                          cudaStream_t stream);
  /// Refuses hooks captured outside a pass (replayed inside whichever pass is open) where
  /// the host side of a pass tallies them between begin_pass and end_pass.
  void check_hook_outside_pass() const;
  /// Whether engine kernels may add to the open pass's counts (fused_target,
  /// pass_count_row).
  bool takes_engine_counts() const noexcept { return takes_engine_counts_; }

  // Once per pass.

  /// The begin-pass kernel (latches the control block), after the policy's host state.
  virtual void begin_pass(std::int64_t pass_id, cudaStream_t stream);
  /// Closes the open pass into the policy's storage.
  virtual void end_pass(cudaStream_t stream) = 0;
  /// Discards the open pass; the storage stays as it was.
  virtual void abort_pass(cudaStream_t stream);

  // Control.

  /// Fills `out`'s recorded fields (its header is filled) with whole, ended passes of
  /// epoch `requested_epoch`; nothing when that epoch has not reached the device yet.
  /// `placements` holds every placement version a pass may refer to.
  virtual void read(Snapshot& out, std::uint64_t requested_epoch,
                    const std::map<std::uint64_t, Placement>& placements) = 0;
  /// Recorder::passes_since: fills `out`'s recorded fields (its header and generation,
  /// `requested_epoch`, are filled) with the passes from arrival `first_arrival` on, copying
  /// only theirs. Policies without a pass window refuse.
  virtual void read_since(PassesSince& out, std::uint64_t requested_epoch,
                          std::int64_t first_arrival,
                          const std::map<std::uint64_t, Placement>& placements);
  /// Recorder::gpu_loads_since: the passes read_since would read, reduced for `num_gpus`
  /// GPUs (which divides P); `header` is read_since's `out` before the read. By default
  /// read_since's rows reduced on the host (gpu_loads_of).
  virtual GpuLoadsSince read_gpu_loads_since(PassesSince header, std::uint64_t requested_epoch,
                                             std::int64_t first_arrival, std::int64_t num_gpus,
                                             const std::map<std::uint64_t, Placement>& placements);
  /// The placement map buffer (0 or 1) the placement word for `placement` names, after
  /// uploading the map where the device converts with it. `current_word` is the word
  /// control calls last wrote.
  virtual std::uint64_t map_buffer_for(const Placement& placement, std::uint64_t current_word);
  /// Blocks until every pass the device has ended is in the trace file.
  virtual void drain_trace();

 protected:
  /// `staging`: where per-layer ids go instead of being counted (null: counted).
  explicit StoragePolicy(const StorageSetup& setup, TokenStaging* staging = nullptr);

  /// Allocates a window ring of `num_slots` slots (pass counts and metadata) into
  /// `setup.buffers`.
  static void allocate_ring(const StorageSetup& setup, DeviceAllocations& memory,
                            std::int64_t num_slots);

  const DeviceBuffers& buffers_;
  const RecordMode mode_;

 private:
  const bool takes_engine_counts_;
  TokenStaging* const staging_;
};

/// Moves passes read from the ring into the rows of a Snapshot or PassesSince, with their
/// logical counts resolved.
template <typename Rows>
void assign_pass_rows(Rows& out, PassRecords&& passes,
                      const std::map<std::uint64_t, Placement>& placements) {
  out.pass_rows() = std::move(passes.pass_rows());
  out.physical_counts.assign(passes.physical_counts.begin(), passes.physical_counts.end());
  out.logical_counts =
      detail::logical_counts_by_pass(out.physical_counts, out.placement_versions, placements);
}

/// Throws unless arrival `wanted` is one a reader may ask for when `arrived` passes reached
/// the window.
void check_arrival(std::int64_t wanted, std::int64_t arrived);

using StorageFactory = std::unique_ptr<StoragePolicy> (*)(const StorageSetup&);

/// The policy of `options.mode` (and window size). Checks the options that policy needs,
/// before any CUDA call.
StorageFactory choose_storage(const RecorderOptions& options, const CudaOptions& cuda_options);

}  // namespace moestat::record::cuda
