// A stand-in for an engine's router: top-k of each token's expert logits, one warp per token,
// optionally counting its choices into a CudaRecorder (moestat/record/cuda_fused.cuh).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <moestat/record/fused_target.hpp>

namespace moestat::bench {

/// Experts the router chooses among (the 288 physical slots of the other benchmarks).
constexpr int kRouterExperts = 288;

/// Writes the top `top_k` expert ids of each of `num_tokens` rows of `logits`
/// [num_tokens, kRouterExperts] into `ids` [num_tokens, top_k]; counts them into `target`
/// when it is non-null.
void launch_router_topk(const float* logits, std::int32_t* ids, std::int64_t num_tokens, int top_k,
                        const record::FusedRecordTarget* target, cudaStream_t stream);

}  // namespace moestat::bench
