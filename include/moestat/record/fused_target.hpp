// What an engine's own kernel needs to count its routing into a CudaRecorder's open pass
// (see moestat/record/cuda_fused.cuh for the device functions). Plain data: host code gets
// it from CudaRecorder::fused_target and passes it to its kernel by value.
#pragma once

#include <cstdint>

namespace moestat::record {

/// One MoE layer of a CudaRecorder, as a kernel parameter. Valid for the recorder's
/// lifetime; the same value serves every pass, so it can be captured in a CUDA graph once.
struct FusedRecordTarget {
  const std::int32_t* recording;      ///< the flag the current pass latched at begin_pass
  std::int32_t* layer_counts;         ///< copy 0 of this layer's counts: [P] ints
  std::int64_t copy_stride;           ///< ints between two copies of the open pass
  std::int32_t num_copies;            ///< copies the adds spread over
  std::int64_t num_physical_experts;  ///< P: ids outside [0, P), other than -1, are dropped
  unsigned long long* dropped_ids;    ///< the open pass's dropped-id tally
  long long* pass_num_tokens;         ///< the open pass's largest valid-token count
};

}  // namespace moestat::record
