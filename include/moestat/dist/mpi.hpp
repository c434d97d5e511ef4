// The MPI transport of the cross-rank reduction (library moestat_dist_mpi, built when CMake
// finds MPI; docs/distributed.md).
#pragma once

#include <mpi.h>

#include <memory>
#include <moestat/dist/collective.hpp>
#include <moestat/dist/reduction_deadline.hpp>

namespace moestat::dist {

/// Collective operations over an MPI communicator. The communicator stays the caller's
/// (not duplicated, not freed); MPI must be initialised before and finalised after use.
///
/// With a deadline (start_reduction), every rank first sends each other rank a one-int
/// message with tag kArrivalTag and waits for theirs, so a rank that does not arrive is
/// named; the collectives are then the non-blocking MPI-3 ones, polled until the deadline.
/// Do not use kArrivalTag for other point-to-point messages on this communicator while a
/// reduction runs. On a timeout, the buffers MPI may still write into are never freed
/// (a few bytes per rank, once: the communicator is unusable afterwards).
class MpiCollective final : public Collective {
 public:
  explicit MpiCollective(MPI_Comm communicator);

  /// The tag of the arrival messages of start_reduction.
  static constexpr int kArrivalTag = 0x6d73;

  void start_reduction(std::chrono::steady_clock::time_point deadline) override;
  void end_reduction() override { deadline_.end(); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void sum(std::span<std::int64_t> values) override;
  void sum(std::span<double> values) override;
  std::vector<std::int64_t> gather(std::span<const std::int64_t> local) override;
  std::vector<std::int32_t> gather(std::span<const std::int32_t> local) override;

 private:
  /// Completes `request` (a collective of this reduction): by the deadline when there is
  /// one, throwing moestat::Error naming `call` and leaking `buffers` (MPI may still write
  /// into them) when it does not complete; otherwise MPI_Wait.
  void wait(MPI_Request& request, const char* call, const std::shared_ptr<void>& buffers);
  template <typename T>
  void sum_in_pieces(std::span<T> values, MPI_Datatype type);
  template <typename T>
  std::vector<T> gather_all(std::span<const T> local, MPI_Datatype type);

  MPI_Comm communicator_;
  ReductionDeadline deadline_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace moestat::dist
