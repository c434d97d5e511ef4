// ReductionDeadline: the deadline of a reduction, polled with backoff.
#include <fmt/format.h>

#include <algorithm>
#include <moestat/dist/reduction_deadline.hpp>
#include <moestat/error.hpp>
#include <thread>

namespace moestat::dist {

bool poll_until(std::chrono::steady_clock::time_point deadline, PollPauses pauses,
                const std::function<bool()>& done) {
  std::chrono::microseconds pause = pauses.first;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, pauses.longest);
  }
}

void ReductionDeadline::start(Clock::time_point deadline) {
  deadline_ = deadline;
  timeout_ = deadline - Clock::now();
}

bool ReductionDeadline::poll(const std::function<bool()>& done) const {
  return poll_until(when(), pauses_, done);
}

std::string ReductionDeadline::timeout_text() const {
  return fmt::format("{:.3g} s", std::chrono::duration<double>(timeout_).count());
}

void ReductionDeadline::fail_incomplete(std::string_view call, int rank,
                                        std::string_view why) const {
  MOESTAT_FAIL("allreduce_snapshot: {} did not complete within {} on rank {}: {}", call,
               timeout_text(), rank, why);
}

}  // namespace moestat::dist
