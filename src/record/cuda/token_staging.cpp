#include "token_staging.hpp"

#include <algorithm>
#include <moestat/error.hpp>

namespace moestat::record::cuda {

TokenStaging::TokenStaging(const DeviceBuffers& buffers, std::int64_t num_layers)
    : buffers_(buffers), layer_staged_(std::size_t(num_layers), 0) {}

void TokenStaging::stage(std::int64_t layer, const IdMatrix& ids, const ValidCount& valid,
                         cudaStream_t stream) {
  MOESTAT_CHECK(!layer_staged_[std::size_t(layer)],
                "per_token mode on the CUDA recorder takes one record_topk per layer and pass; "
                "layer {} was already recorded in this pass",
                layer);
  layer_staged_[std::size_t(layer)] = 1;
  max_rows_ = std::max(max_rows_, ids.num_rows);
  launch_trace_layer(buffers_, layer, ids, valid, stream);
}

void TokenStaging::clear() {
  std::fill(layer_staged_.begin(), layer_staged_.end(), 0);
  max_rows_ = 0;
}

}  // namespace moestat::record::cuda
