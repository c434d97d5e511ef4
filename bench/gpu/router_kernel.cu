#include <cfloat>
#include <moestat/record/cuda_fused.cuh>

#include "cuda_check.hpp"
#include "router_kernel.hpp"

namespace moestat::bench {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kPerLane = kRouterExperts / 32;
static_assert(kRouterExperts % 32 == 0);

template <bool kRecord>
__global__ void router_topk_kernel(const float* logits, std::int32_t* ids, long long num_tokens,
                                   int top_k, record::FusedRecordTarget target) {
  const long long token = static_cast<long long>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  bool recording = false;
  if constexpr (kRecord) recording = record::fused::is_recording(target);
  if (token >= num_tokens) return;  // whole warps leave together
  float values[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) values[j] = logits[token * kRouterExperts + j * 32 + lane];
  int chosen = -1;  // lane r keeps the expert of round r
  for (int round = 0; round < top_k; ++round) {
    float best = -FLT_MAX;
    int best_index = 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      if (values[j] > best) {
        best = values[j];
        best_index = j * 32 + lane;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(0xffffffffu, best, offset);
      const int other_index = __shfl_xor_sync(0xffffffffu, best_index, offset);
      if (other > best || (other == best && other_index < best_index)) {
        best = other;
        best_index = other_index;
      }
    }
    if (best_index % 32 == lane) values[best_index / 32] = -FLT_MAX;
    if (lane == round) chosen = best_index;
  }
  if (lane < top_k) ids[token * top_k + lane] = chosen;
  if constexpr (kRecord) {
    // One add per lane, all in flight at once, as the ids are stored.
    if (recording && lane < top_k) record::fused::add_id(target, chosen);
    if (recording && token == 0 && lane == 0) record::fused::add_valid_tokens(target, num_tokens);
  }
}

}  // namespace

void launch_router_topk(const float* logits, std::int32_t* ids, std::int64_t num_tokens, int top_k,
                        const record::FusedRecordTarget* target, cudaStream_t stream) {
  const auto blocks = unsigned((num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock);
  if (target != nullptr) {
    router_topk_kernel<true>
        <<<blocks, kWarpsPerBlock * 32, 0, stream>>>(logits, ids, num_tokens, top_k, *target);
  } else {
    router_topk_kernel<false>
        <<<blocks, kWarpsPerBlock * 32, 0, stream>>>(logits, ids, num_tokens, top_k, {});
  }
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace moestat::bench
