// The few collective operations a cross-rank snapshot reduction needs, so the reduction is
// written once and each transport (MPI today; see docs/distributed.md) implements only these.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

namespace moestat::dist {

/// A group of ranks that take part in every call together (a communicator). Every call is
/// collective: all ranks of the group make it, in the same order, or it never returns.
class Collective {
 public:
  virtual ~Collective() = default;

  /// Starts one reduction that must end by `deadline`: waits until every rank of the group
  /// has started it, and throws moestat::Error naming the ranks that did not by the deadline.
  /// The calls after it, until the next start_reduction, throw moestat::Error if they cannot
  /// complete by the deadline. After such an error the group cannot be used again (a
  /// collective some rank left half done cannot be taken back). A transport that cannot time
  /// out keeps this default, which does nothing: its calls wait as long as they need.
  virtual void start_reduction(std::chrono::steady_clock::time_point deadline) {
    static_cast<void>(deadline);
  }
  /// Ends the reduction start_reduction began: later calls have no deadline again.
  virtual void end_reduction() {}

  /// This process's rank in [0, size()).
  virtual int rank() const = 0;
  /// Ranks in the group.
  virtual int size() const = 0;

  /// In place: every rank ends with the element-wise sum over ranks. `values` has the same
  /// length on every rank.
  virtual void sum(std::span<std::int64_t> values) = 0;
  virtual void sum(std::span<double> values) = 0;

  /// Every rank's `local`, concatenated in rank order, on every rank; lengths may differ
  /// between ranks.
  virtual std::vector<std::int64_t> gather(std::span<const std::int64_t> local) = 0;
  virtual std::vector<std::int32_t> gather(std::span<const std::int32_t> local) = 0;
};

}  // namespace moestat::dist
