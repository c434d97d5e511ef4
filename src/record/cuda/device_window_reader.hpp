// Reads ended passes out of the device window ring: the one reader behind a windowed
// snapshot, passes_since, gpu_loads_since and the pass collector. The device writes pass n into
// slot n % num_slots and never waits for the host, so a pass is taken only if its slot cannot have
// been reused while it was copied; the rest are left out whole, never half read.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <moestat/pass_rows.hpp>
#include <optional>
#include <vector>

#include "device_reads.hpp"
#include "device_state.cuh"

namespace moestat::record::cuda {

/// Whole passes read from the ring, in pass order: their rows and device counts.
struct PassRecords : PassRows {
  std::vector<std::int32_t> physical_counts;  ///< [N, L, P]; empty after read_on_device.
};

/// What one read found.
struct WindowRead {
  DeviceState state;       ///< The state the read began from (not mid-update).
  long long first_intact;  ///< First pass appended; those before it that were wanted are lost.
  long long first_copied;  ///< First pass whose counts were copied (read_on_device: row 0).
};

class DeviceWindowReader {
 public:
  /// Reads the ring of `buffers`, which must outlive the reader. `reader` names the caller
  /// in the error raised when the device state never settles.
  DeviceWindowReader(const DeviceBuffers& buffers, const char* reader)
      : buffers_(buffers), reader_(reader) {}

  /// Appends to `out` the whole passes from the first one wanted to the device cursor.
  /// `first_wanted(state)` is asked on each attempt with the state the attempt began from:
  /// the first pass to read, or nullopt to read none (read then returns nullopt). Passes
  /// older than the ring holds are skipped. Copies on `stream`, which it synchronises.
  template <typename FirstWanted>
  std::optional<WindowRead> read(cudaStream_t stream, PassRecords& out,
                                 FirstWanted&& first_wanted) {
    return read_into(stream, out, nullptr, first_wanted);
  }

  /// As read, but the counts stay on the device: each attempt copies the passes it reads
  /// into `device_rows` ([num_slots - 1, L, P] int32 device memory: the most one read takes),
  /// pass first_copied in row 0, and `out.physical_counts` stays empty. The rows of the passes
  /// appended (from first_intact on) are whole once `stream` reaches them.
  template <typename FirstWanted>
  std::optional<WindowRead> read_on_device(cudaStream_t stream, PassRecords& out,
                                           std::int32_t* device_rows, FirstWanted&& first_wanted) {
    return read_into(stream, out, device_rows, first_wanted);
  }

 private:
  /// The sequence-locked attempts of read and read_on_device (`device_rows` null: to the host).
  template <typename FirstWanted>
  std::optional<WindowRead> read_into(cudaStream_t stream, PassRecords& out,
                                      std::int32_t* device_rows, FirstWanted& first_wanted) {
    for (int attempt = 0; attempt < kMaxStateReads; ++attempt) {
      const DeviceState before = read_device_state(buffers_.state, stream);
      if (before.seq % 2 != 0) continue;
      const std::optional<long long> first = first_wanted(before);
      if (!first) return std::nullopt;
      if (std::optional<WindowRead> read = read_from(before, *first, device_rows, stream, out)) {
        return read;
      }
    }
    fail_unsettled_state(reader_);
  }

  /// One attempt from state `before`: nullopt when a reset reached the device meanwhile.
  std::optional<WindowRead> read_from(const DeviceState& before, long long first_wanted,
                                      std::int32_t* device_rows, cudaStream_t stream,
                                      PassRecords& out);

  const DeviceBuffers& buffers_;
  const char* reader_;
  // Host copies of the ring, kept between reads so a read does not allocate.
  std::vector<std::int32_t> ring_counts_;          ///< the slots of the passes read, in order
  std::vector<long long> slot_pass_ids_;           ///< [num_slots]
  std::vector<long long> slot_num_tokens_;         ///< [num_slots]
  std::vector<unsigned long long> slot_versions_;  ///< [num_slots]
};

}  // namespace moestat::record::cuda
