// The deadline of a reduction, for the transports that poll their operations (MPI, NCCL):
// one place that keeps it, polls until it and words the error of an operation that missed
// it, so that the transports keep only what their library needs.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace moestat::dist {

/// How a poll sleeps between two tries: `first`, then twice as long each time, at most
/// `longest`, so that a quick operation is seen quickly and a slow one does not hold a core.
struct PollPauses {
  std::chrono::microseconds first;
  std::chrono::microseconds longest;
};

/// Calls `done` until it returns true or `deadline` passes; whether it did. `done` is called
/// at least once, even after the deadline.
bool poll_until(std::chrono::steady_clock::time_point deadline, PollPauses pauses,
                const std::function<bool()>& done);

/// The reduction in progress (Collective::start_reduction to end_reduction) of a transport:
/// whether it has a deadline, which one, and how long it was given, which its errors name.
class ReductionDeadline {
 public:
  using Clock = std::chrono::steady_clock;

  /// `pauses`: how this transport polls (poll).
  explicit ReductionDeadline(PollPauses pauses) : pauses_(pauses) {}

  /// A reduction that must end by `deadline` starts now.
  void start(Clock::time_point deadline);
  /// The reduction ended: operations wait as long as they need until the next start.
  void end() { deadline_.reset(); }
  /// Whether a reduction with a deadline is in progress.
  bool active() const { return deadline_.has_value(); }
  Clock::time_point when() const { return deadline_.value(); }

  /// poll_until the deadline, with this transport's pauses. Only while active().
  bool poll(const std::function<bool()>& done) const;
  /// How long the reduction was given, for messages: "2 s".
  std::string timeout_text() const;
  /// Throws moestat::Error for an operation `call` of rank `rank` that did not complete by
  /// the deadline: "allreduce_snapshot: CALL did not complete within T on rank R: WHY",
  /// `why` saying what the transport knows of the cause and what became of the group.
  [[noreturn]] void fail_incomplete(std::string_view call, int rank, std::string_view why) const;

 private:
  PollPauses pauses_;
  std::optional<Clock::time_point> deadline_;
  Clock::duration timeout_{};
};

}  // namespace moestat::dist
