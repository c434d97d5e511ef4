// Recording from inside an engine's own kernel (its router top-k, say), for engines that
// write their kernels: the count costs a few atomics in a kernel that runs anyway instead
// of a graph node of its own. Include from .cu files only.
//
//   __global__ void router_topk(..., moestat::record::FusedRecordTarget target) {
//     const bool recording = moestat::record::fused::is_recording(target);  // load early
//     ... choose the token's experts ...
//     if (recording) {
//       for (int k = 0; k < top_k; ++k) moestat::record::fused::add_id(target, expert[k]);
//       if (token == 0) moestat::record::fused::add_valid_tokens(target, num_tokens);
//     }
//   }
//
// The kernel must run on the recorder's stream between begin_pass and end_pass, like a hook.
#pragma once

#include <moestat/record/fused_target.hpp>

namespace moestat::record::fused {

/// Whether the open pass records. One load; issue it with the kernel's first loads.
__device__ __forceinline__ bool is_recording(const FusedRecordTarget& target) {
  return *target.recording != 0;
}

/// Counts one routed id: -1 is ignored, other ids outside [0, P) are dropped and tallied.
/// Adds go to copy blockIdx.x % num_copies, so a hot expert's counter is not hit by every
/// block of a large batch.
__device__ __forceinline__ void add_id(const FusedRecordTarget& target, long long id) {
  if (id == -1) return;
  if (static_cast<unsigned long long>(id) >=
      static_cast<unsigned long long>(target.num_physical_experts)) {
    atomicAdd(target.dropped_ids, 1ull);
    return;
  }
  const long long copy = blockIdx.x % static_cast<unsigned>(target.num_copies);
  atomicAdd(target.layer_counts + copy * target.copy_stride + id, 1);
}

/// Records how many tokens of the batch were real (the pass keeps the largest count of any
/// layer, as the record_topk hook does). Call once per kernel, from any thread.
__device__ __forceinline__ void add_valid_tokens(const FusedRecordTarget& target,
                                                 long long num_valid_tokens) {
  atomicMax(target.pass_num_tokens, num_valid_tokens);
}

}  // namespace moestat::record::fused
