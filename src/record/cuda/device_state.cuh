// Memory layout shared by the CUDA recorder's kernels and its host side. Plain structs and
// pointers only: no torch, no host runtime objects.
#pragma once

#include <cstdint>

namespace moestat::record::cuda {

/// Requests from control threads, in device memory. Hosts write each field with its own
/// copy on a private stream (8- and 4-byte aligned writes land whole); the begin-pass
/// kernel latches them for its pass, so no hook reads host memory and control never touches
/// the engine's stream. Fields may be seen in either order: a pass that latches "recording"
/// under an old epoch is discarded when the new epoch's reset is applied.
struct ControlBlock {
  std::uint64_t epoch;  ///< Bumped by start/reset; a change resets the data.
  /// (placement version << 1) | map buffer: one word, so a pass never sees a version with
  /// another placement's map.
  std::uint64_t placement_word;
  std::int32_t recording;  ///< 1 while recording is requested.
  std::int32_t padding;
};

/// Copies of the open pass's counts that record kernels spread their atomics over, so a
/// hot expert's counter is not hit by every block of a large batch.
constexpr int kPassCopies = 16;

/// Recorder state in device memory. The begin- and end-pass kernels write it; record
/// kernels only add to the open pass's tallies. The host reads it with a sequence lock
/// (seq is odd while a single-threaded kernel updates the fields below it).
struct DeviceState {
  unsigned long long seq;
  long long cursor;  ///< Recorded passes since creation; pass n ends in slot n % num_slots.
  long long base;    ///< cursor at the last reset: passes [base, cursor) belong to the data.
  unsigned long long applied_epoch;
  unsigned long long dropped_ids;        ///< Dropped ids of ended passes since the last reset.
  unsigned long long placement_version;  ///< Latched for the open pass.
  long long pass_id;                     ///< Latched for the open pass.
  /// Blocks of the fold kernel started ever: num_layers * cursor when no pass is ending, so
  /// a reader can tell whether the decayed loads were being written during its copy.
  unsigned long long fold_blocks;
  long long pass_num_tokens;        ///< Open pass: most valid tokens of any topk hook.
  unsigned long long pass_dropped;  ///< Open pass: ids dropped so far.
  // Per-token mode.
  unsigned long long dropped_tokens;  ///< Tokens that did not fit, since the last reset.
  long long trace_head;               ///< Tokens ever placed in the host ring.
  long long trace_descriptors;        ///< Descriptors ever written.
  long long trace_pending_first;      ///< Ring position of the ending pass's first token.
  long long trace_pending_count;      ///< Tokens of the ending pass to copy.
  /// Latched for the open pass: every thread of every hook reads this. A cache line of its
  /// own keeps those loads from waiting behind the atomics on the open pass's tallies above.
  alignas(128) std::int32_t recording;
  std::int32_t placement_buffer;  ///< Latched for the open pass.
};

/// A drained pass as the writer thread finds it in the host descriptor ring.
struct TraceDescriptor {
  long long pass_id;
  unsigned long long placement_version;
  long long first_token;  ///< Position in the host ring (modulo its capacity).
  long long num_tokens;
};

/// Cursors shared with the writer thread, in pinned host memory mapped into the device.
struct TraceCursors {
  long long published_descriptors;  ///< Written by the device once a pass's copy landed.
  long long consumed_descriptors;   ///< Written by the writer thread.
  long long consumed_tokens;        ///< Written by the writer thread: ring space it freed.
};

/// Per-token mode: a device staging area for the open pass and a pinned host ring.
struct TraceBuffers {
  std::int32_t* staging;      ///< [max_tokens, L, top_k] device
  std::int32_t* layer_rows;   ///< [L] device: rows each layer staged this pass, 0 = none
  unsigned int* copy_ticket;  ///< device: blocks of the copy kernel done
  long long max_tokens;
  std::int32_t* host_ring;  ///< [capacity, L, top_k] pinned, mapped
  long long capacity;
  TraceDescriptor* host_descriptors;  ///< [descriptor_capacity] pinned, mapped
  long long descriptor_capacity;
  TraceCursors* cursors;  ///< pinned, mapped
  long long top_k;
};

/// Device buffers, all allocated when the recorder is created.
struct DeviceBuffers {
  DeviceState* state;
  const ControlBlock* control;
  /// [kPassCopies, L, P] the open pass. Copies 1.. are zero between passes; copy 0 also
  /// takes engine kernels' adds, recorded or not, and is cleared when a recorded pass begins.
  std::int32_t* pass_counts;
  std::int32_t* window;                ///< [num_slots, L, P] counts of ended passes.
  long long* slot_pass_ids;            ///< [num_slots]
  unsigned long long* slot_versions;   ///< [num_slots]
  long long* slot_num_tokens;          ///< [num_slots]
  double* decayed_physical;            ///< [L, P] decayed mode only, else null.
  double* decayed_logical;             ///< [L, E] decayed mode only, else null.
  const std::int32_t* placement_maps;  ///< [2, L, P] physical -> logical, double-buffered.
  TraceBuffers trace;                  ///< Per-token mode only; zero otherwise.
  std::int64_t num_slots;
  std::int64_t num_layers;
  std::int64_t num_physical_experts;
  std::int64_t num_logical_experts;
};

}  // namespace moestat::record::cuda
