// Hooks from many threads at once (an engine or a Python program that feeds one recorder
// from several threads) while a control thread starts, stops, resets and snapshots it: the
// recorder must never crash, and what it commits must still be whole passes. Each feeding
// thread runs begin_pass, its layers and end_pass; a begin_pass while another thread's pass is
// open fails with moestat::Error (and that thread tries again), so each committed pass is one
// thread's, and its counts follow from its pass id. Every mode; sanitizers see the races.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <moestat/error.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <string>
#include <thread>
#include <vector>

namespace moestat {
namespace {

constexpr std::int64_t kLayers = 3;
constexpr std::int64_t kExperts = 8;
constexpr std::int64_t kTopK = 2;
constexpr int kFeedingThreads = 8;
constexpr int kPassesPerThread = 150;
constexpr int kSharedCalls = 100;  // per thread, into the one pass

ModelTopology threads_topology() {
  ModelTopology topology = ModelTopology::uniform(kLayers, kExperts, kTopK);
  topology.ep_size = 2;
  return topology;
}

std::int64_t tokens_of(std::int64_t pass) { return 1 + pass % 7; }

std::int32_t id_of(std::int64_t pass, std::int64_t layer, std::int64_t token, std::int64_t column) {
  return std::int32_t((pass * 7 + layer * 3 + token * 5 + column) % kExperts);
}

/// [L, E] counts of pass `pass`.
std::vector<std::int64_t> expected_counts(std::int64_t pass) {
  std::vector<std::int64_t> counts(std::size_t(kLayers * kExperts), 0);
  for (std::int64_t l = 0; l < kLayers; ++l)
    for (std::int64_t t = 0; t < tokens_of(pass); ++t)
      for (std::int64_t c = 0; c < kTopK; ++c)
        ++counts[std::size_t(l * kExperts + id_of(pass, l, t, c))];
  return counts;
}

/// One pass of `pass`'s signature: top-k ids, or (stat_approx) each rank's local counts.
void feed_pass(Recorder& recorder, std::int64_t pass, RecordMode mode) {
  recorder.begin_pass(pass);
  const std::int64_t tokens = tokens_of(pass);
  for (std::int64_t l = 0; l < kLayers; ++l) {
    if (mode == RecordMode::kStatApprox) {
      const std::vector<std::int64_t> counts = expected_counts(pass);
      const std::int64_t local = kExperts / 2;
      for (std::int64_t rank = 0; rank < 2; ++rank) {
        const TensorView view = TensorView::contiguous(counts.data() + l * kExperts + rank * local,
                                                       DType::kInt64, {local});
        recorder.record_local_counts(l, view, rank);
      }
      continue;
    }
    std::vector<std::int32_t> ids(std::size_t(tokens * kTopK));
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t c = 0; c < kTopK; ++c)
        ids[std::size_t(t * kTopK + c)] = id_of(pass, l, t, c);
    recorder.record_topk(l, TensorView::contiguous(ids.data(), DType::kInt32, {tokens, kTopK}));
  }
  recorder.end_pass();
}

/// Every pass row of the snapshot (pass-keeping modes) or token run (per_token) is whole.
void check_whole_passes(const Snapshot& snapshot, RecordMode mode) {
  if (mode == RecordMode::kPerToken) {
    for (std::int64_t token = 0; token < snapshot.num_tokens(); ++token) {
      const std::int64_t pass = snapshot.token_pass_ids[std::size_t(token)];
      // the token's index within its pass: count back to the first token of the run
      std::int64_t first = token;
      while (first > 0 && snapshot.token_pass_ids[std::size_t(first - 1)] == pass) --first;
      const std::int64_t t = token - first;
      ASSERT_LT(t, tokens_of(pass)) << "pass " << pass;
      for (std::int64_t l = 0; l < kLayers; ++l)
        for (std::int64_t c = 0; c < kTopK; ++c) {
          ASSERT_EQ(snapshot.token_physical_ids[std::size_t((token * kLayers + l) * kTopK + c)],
                    id_of(pass, l, t, c))
              << "pass " << pass << " token " << t;
        }
    }
    return;
  }
  if (mode == RecordMode::kDecayed) return;  // a sum: nothing per pass to compare
  for (std::int64_t row = 0; row < snapshot.window_size(); ++row) {
    const std::int64_t pass = snapshot.pass_ids[std::size_t(row)];
    const auto first = snapshot.physical_counts.begin() + row * kLayers * kExperts;
    ASSERT_EQ(std::vector<std::int64_t>(first, first + kLayers * kExperts), expected_counts(pass))
        << "pass " << pass;
  }
}

void hammer(RecordMode mode) {
  RecorderOptions options;
  options.mode = mode;
  options.window_size = 32;
  options.per_token_capacity = 256;
  record::CpuRecorder recorder(threads_topology(), options);
  recorder.start();
  std::atomic<int> running{kFeedingThreads};
  std::atomic<std::int64_t> committed{0};
  std::atomic<std::int64_t> refused{0};
  std::vector<std::string> unexpected(kFeedingThreads);
  std::vector<std::thread> feeders;
  for (int thread = 0; thread < kFeedingThreads; ++thread) {
    feeders.emplace_back([&, thread] {
      for (int i = 0; i < kPassesPerThread;) {
        try {
          feed_pass(recorder, std::int64_t(thread) * 100000 + i, mode);
          ++i;
          ++committed;
        } catch (const Error& error) {
          const std::string what = error.what();
          if (what.find("while a pass is open") != std::string::npos) {
            ++refused;  // another thread's pass: try again
            std::this_thread::yield();
            continue;
          }
          unexpected[std::size_t(thread)] = what;
          break;
        }
      }
      --running;
    });
  }
  std::int64_t snapshots = 0;
  for (int step = 0; running.load() > 0; ++step) {
    switch (step % 6) {
      case 0:
        recorder.stop();
        break;
      case 1:
        recorder.start();
        break;
      case 2:
        recorder.reset();
        break;
      default: {
        const Snapshot snapshot = recorder.snapshot();
        ++snapshots;
        ASSERT_NO_FATAL_FAILURE(check_whole_passes(snapshot, mode)) << "snapshot " << snapshots;
      }
    }
  }
  for (std::thread& feeder : feeders) feeder.join();
  for (const std::string& what : unexpected) EXPECT_EQ(what, "");
  EXPECT_EQ(committed.load(), std::int64_t(kFeedingThreads) * kPassesPerThread);
  // Afterwards the recorder is whole: a pass fed alone is recorded exactly.
  recorder.start();
  feed_pass(recorder, 4, mode);
  const Snapshot last = recorder.snapshot();
  EXPECT_EQ(last.num_passes, 1);
  if (mode != RecordMode::kDecayed) {
    EXPECT_EQ(last.logical_totals(), expected_counts(4));
  }
  ASSERT_NO_FATAL_FAILURE(check_whole_passes(last, mode));
}

/// Eight threads record into one open pass at the same time: every call counts.
void share_one_pass(RecordMode mode) {
  RecorderOptions options;
  options.mode = mode;
  options.per_token_capacity = 1 << 18;
  record::CpuRecorder recorder(threads_topology(), options);
  recorder.start();
  recorder.begin_pass(0);
  std::vector<std::thread> feeders;
  for (int thread = 0; thread < kFeedingThreads; ++thread) {
    feeders.emplace_back([&, thread] {
      for (int i = 0; i < kSharedCalls; ++i) {
        // ids of "pass" 1000 * thread + i, spread over the layers: long enough calls
        // (up to 1000 rows) that they overlap
        const std::int64_t call = std::int64_t(thread) * 1000 + i;
        const std::int64_t layer = (thread + i) % kLayers;
        const std::int64_t rows = 1 + call * 37 % 1000;
        std::vector<std::int32_t> ids(std::size_t(rows * kTopK));
        for (std::int64_t t = 0; t < rows; ++t)
          for (std::int64_t c = 0; c < kTopK; ++c)
            ids[std::size_t(t * kTopK + c)] = id_of(call, layer, t, c);
        recorder.record_topk(layer,
                             TensorView::contiguous(ids.data(), DType::kInt32, {rows, kTopK}));
      }
    });
  }
  std::vector<std::int64_t> expected(std::size_t(kLayers * kExperts), 0);
  for (int thread = 0; thread < kFeedingThreads; ++thread)
    for (int i = 0; i < kSharedCalls; ++i) {
      const std::int64_t call = std::int64_t(thread) * 1000 + i;
      const std::int64_t layer = (thread + i) % kLayers;
      for (std::int64_t t = 0; t < 1 + call * 37 % 1000; ++t)
        for (std::int64_t c = 0; c < kTopK; ++c)
          ++expected[std::size_t(layer * kExperts + id_of(call, layer, t, c))];
    }
  for (std::thread& feeder : feeders) feeder.join();
  recorder.end_pass();
  const Snapshot snapshot = recorder.snapshot();
  if (mode == RecordMode::kDecayed) {
    ASSERT_EQ(snapshot.decayed_logical_load.size(), expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i)
      EXPECT_EQ(snapshot.decayed_logical_load[i], double(expected[i])) << i;
  } else {
    EXPECT_EQ(snapshot.logical_totals(), expected);
  }
}

TEST(RecorderThreads, StatIntoOnePass) { share_one_pass(RecordMode::kStat); }
TEST(RecorderThreads, PerPassIntoOnePass) { share_one_pass(RecordMode::kPerPass); }
TEST(RecorderThreads, PerTokenIntoOnePass) { share_one_pass(RecordMode::kPerToken); }
TEST(RecorderThreads, DecayedIntoOnePass) { share_one_pass(RecordMode::kDecayed); }

TEST(RecorderThreads, StatFromEightThreads) { hammer(RecordMode::kStat); }
TEST(RecorderThreads, StatApproxFromEightThreads) { hammer(RecordMode::kStatApprox); }
TEST(RecorderThreads, PerPassFromEightThreads) { hammer(RecordMode::kPerPass); }
TEST(RecorderThreads, PerTokenFromEightThreads) { hammer(RecordMode::kPerToken); }
TEST(RecorderThreads, DecayedFromEightThreads) { hammer(RecordMode::kDecayed); }

}  // namespace
}  // namespace moestat
