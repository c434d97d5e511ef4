// The CPU counting loop: a histogram of top-k ids with two extra bins for padding and
// out-of-range ids, optionally copying each token's ids into a per-token trace.
#pragma once

#include <cstdint>
#include <moestat/tensor_view.hpp>

namespace moestat::detail {

/// Where count_topk writes token t's ids: first[t * token_stride + column].
struct TraceSink {
  std::int32_t* first;
  std::int64_t token_stride;
};

/// Adds the first `num_tokens` rows of `topk_ids` (int32/int64, host memory, any strides)
/// to `bins`: bins[id] for id in [0, num_bins), bins[num_bins] for other ids except -1,
/// bins[num_bins + 1] for -1. `bins` has num_bins + 2 entries. With a trace, each id is
/// also written there (-1 for padding and out-of-range ids).
void count_topk(const TensorView& topk_ids, std::int64_t num_tokens, std::int64_t num_bins,
                std::int64_t* bins, const TraceSink* trace);

}  // namespace moestat::detail
