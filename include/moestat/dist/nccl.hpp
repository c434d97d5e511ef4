// The NCCL transport of the cross-rank reduction (library moestat_dist_nccl, built with the
// CUDA recorder when CMake finds NCCL; docs/distributed.md).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <moestat/dist/collective.hpp>
#include <moestat/dist/reduction_deadline.hpp>

namespace moestat::dist {

/// A communicator whose calls never block the host (ncclConfig_t::blocking = 0), which is
/// what lets a reduction stop at its deadline even while NCCL connects the ranks (a blocking
/// communicator may hang inside an NCCL call, where no deadline can reach). Collective: every
/// rank calls it with the same `id` (from ncclGetUniqueId on one rank), its GPU current.
/// Throws moestat::Error if the ranks have not all joined by `deadline` (the half-made
/// communicator is aborted). The caller owns the result (ncclCommDestroy).
ncclComm_t make_nonblocking_communicator(const ncclUniqueId& id, int num_ranks, int rank,
                                         std::chrono::steady_clock::time_point deadline);

/// Collective operations over an NCCL communicator, one rank per GPU. Host arrays go through
/// device buffers allocated for the call, on `stream`, which the call synchronises: this is
/// for snapshots, outside the forward pass. Communicator and stream stay the caller's; the
/// calling thread's current device must be the communicator's.
///
/// Within a reduction with a deadline (start_reduction), each call polls its NCCL operation
/// and the stream until the deadline, then aborts the communicator (ncclCommAbort) and throws
/// moestat::Error: NCCL cannot tell which rank is missing. After that aborted() is true and
/// the caller must neither use nor destroy the communicator. Only a non-blocking
/// communicator (make_nonblocking_communicator) bounds every wait; with a blocking one an
/// NCCL call itself may block past the deadline.
class NcclCollective final : public Collective {
 public:
  NcclCollective(ncclComm_t communicator, cudaStream_t stream);

  void start_reduction(std::chrono::steady_clock::time_point deadline) override;
  void end_reduction() override { deadline_.end(); }
  /// Whether a deadline passed and the communicator was aborted.
  bool aborted() const { return aborted_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void sum(std::span<std::int64_t> values) override;
  void sum(std::span<double> values) override;
  std::vector<std::int64_t> gather(std::span<const std::int64_t> local) override;
  std::vector<std::int32_t> gather(std::span<const std::int32_t> local) override;

 private:
  /// Completes an NCCL call that returned `result` (ncclInProgress on a non-blocking
  /// communicator until it has been enqueued), then the stream's work, by the deadline.
  void complete(ncclResult_t result, const char* call);
  /// Aborts the communicator and throws the timeout error for `call`.
  [[noreturn]] void abort(const char* call);

  template <typename T>
  void sum_on_device(std::span<T> values);
  template <typename T>
  std::vector<T> gather_equal(std::span<const T> local, std::size_t width);
  template <typename T>
  std::vector<T> gather_any(std::span<const T> local);

  ncclComm_t communicator_;
  cudaStream_t stream_;
  ReductionDeadline deadline_;
  bool aborted_ = false;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace moestat::dist
