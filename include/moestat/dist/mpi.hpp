// The MPI transport of the cross-rank reduction (library moestat_mpi, built when CMake finds
// MPI; docs/distributed.md).
#pragma once

#include <mpi.h>

#include <moestat/dist/collective.hpp>

namespace moestat::dist {

/// Collective operations over an MPI communicator. The communicator stays the caller's
/// (not duplicated, not freed); MPI must be initialised before and finalised after use.
class MpiCollective final : public Collective {
 public:
  explicit MpiCollective(MPI_Comm communicator);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void sum(std::span<std::int64_t> values) override;
  void sum(std::span<double> values) override;
  std::vector<std::int64_t> gather(std::span<const std::int64_t> local) override;
  std::vector<std::int32_t> gather(std::span<const std::int32_t> local) override;

 private:
  MPI_Comm communicator_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace moestat::dist
