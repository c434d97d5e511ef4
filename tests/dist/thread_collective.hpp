// An in-process Collective for tests: N threads, one per rank, meeting at a barrier.
#pragma once

#include <barrier>
#include <functional>
#include <moestat/dist/collective.hpp>
#include <thread>
#include <vector>

namespace moestat::test {

/// The ranks' shared meeting point: each call publishes the caller's span, waits for all
/// ranks, reads everyone's, and waits again before the spans may change.
class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), barrier_(size), published_(std::size_t(size)) {}
  int size() const { return size_; }

  /// Runs `body(collective)` on `size` threads, one per rank, and returns when all are done.
  void run(const std::function<void(dist::Collective&)>& body);

 private:
  friend class ThreadCollective;
  int size_;
  std::barrier<> barrier_;
  std::vector<std::pair<const void*, std::size_t>> published_;  // per rank: data, length
};

class ThreadCollective final : public dist::Collective {
 public:
  ThreadCollective(ThreadGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }
  void sum(std::span<std::int64_t> values) override { sum_typed(values); }
  void sum(std::span<double> values) override { sum_typed(values); }
  std::vector<std::int64_t> gather(std::span<const std::int64_t> local) override {
    return gather_typed(local);
  }
  std::vector<std::int32_t> gather(std::span<const std::int32_t> local) override {
    return gather_typed(local);
  }

 private:
  template <typename T>
  std::vector<T> gather_typed(std::span<const T> local) {
    group_.published_[std::size_t(rank_)] = {local.data(), local.size()};
    group_.barrier_.arrive_and_wait();
    std::vector<T> out;
    for (const auto& [data, length] : group_.published_) {
      const T* first = static_cast<const T*>(data);
      out.insert(out.end(), first, first + length);
    }
    group_.barrier_.arrive_and_wait();
    return out;
  }

  template <typename T>
  void sum_typed(std::span<T> values) {
    const std::vector<T> all = gather_typed(std::span<const T>(values));
    for (std::size_t i = 0; i < values.size(); ++i) {
      T total{};
      for (int r = 0; r < size(); ++r) total += all[std::size_t(r) * values.size() + i];
      values[i] = total;
    }
  }

  ThreadGroup& group_;
  int rank_;
};

inline void ThreadGroup::run(const std::function<void(dist::Collective&)>& body) {
  std::vector<std::jthread> ranks;
  for (int rank = 0; rank < size_; ++rank) {
    ranks.emplace_back([this, rank, &body] {
      ThreadCollective collective(*this, rank);
      body(collective);
    });
  }
}

}  // namespace moestat::test
