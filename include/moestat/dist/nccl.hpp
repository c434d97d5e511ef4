// The NCCL transport of the cross-rank reduction (library moestat_nccl, built with the CUDA
// recorder when CMake finds NCCL; docs/distributed.md).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <moestat/dist/collective.hpp>

namespace moestat::dist {

/// Collective operations over an NCCL communicator, one rank per GPU. Host arrays go through
/// device buffers allocated for the call, on `stream`, which the call synchronises: this is
/// for snapshots, outside the forward pass. Communicator and stream stay the caller's; the
/// calling thread's current device must be the communicator's.
class NcclCollective final : public Collective {
 public:
  NcclCollective(ncclComm_t communicator, cudaStream_t stream);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void sum(std::span<std::int64_t> values) override;
  void sum(std::span<double> values) override;
  std::vector<std::int64_t> gather(std::span<const std::int64_t> local) override;
  std::vector<std::int32_t> gather(std::span<const std::int32_t> local) override;

 private:
  ncclComm_t communicator_;
  cudaStream_t stream_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace moestat::dist
