// per_token mode's host side of the open pass: the layers that staged ids and the largest
// batch among them, so end_pass copies only rows that exist. Forward-thread state, like the
// hooks.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "device_state.cuh"
#include "record_kernels.cuh"

namespace moestat::record::cuda {

class TokenStaging {
 public:
  TokenStaging(const DeviceBuffers& buffers, std::int64_t num_layers);

  /// Stages the valid rows of `ids` as layer `layer` of the open pass. A layer takes one
  /// call per pass.
  void stage(std::int64_t layer, const IdMatrix& ids, const ValidCount& valid, cudaStream_t stream);
  /// Forgets the pass's layers, when a pass begins or is aborted.
  void clear();
  /// The most rows any layer of the pass staged (bounds the copy at end_pass).
  std::int64_t max_rows() const noexcept { return max_rows_; }

 private:
  const DeviceBuffers& buffers_;
  std::vector<std::uint8_t> layer_staged_;  ///< [L] a layer was staged this pass
  std::int64_t max_rows_ = 0;               ///< largest captured batch of this pass's hooks
};

}  // namespace moestat::record::cuda
