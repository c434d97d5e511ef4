// Stress: a forward thread records passes in a loop while the control thread calls start,
// stop, reset, set_placement and snapshot. Every pass has a known signature (its ids derive
// from its pass id), so each snapshot can be checked exactly: only whole passes, consecutive
// pass ids, no pass lost, nothing recorded while stopped. No assertion depends on timing.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <moestat/record/cpu_recorder.hpp>
#include <string>
#include <thread>
#include <vector>

namespace moestat {
namespace {

using record::CpuRecorder;

// ---- Naive reference: what pass `pass` records ----

constexpr std::int64_t kLayers = 4;  // layer 1 is dense
constexpr std::int64_t kLogical = 6;
constexpr std::int64_t kPhysical = 8;
constexpr std::int64_t kTopK = 2;
constexpr std::int64_t kPaddingRows = 2;

ModelTopology stress_topology() {
  ModelTopology topology;
  topology.num_layers = kLayers;
  topology.moe_layers = std::vector<bool>{true, false, true, true};
  topology.num_logical_experts = kLogical;
  topology.num_physical_experts = kPhysical;
  topology.top_k = kTopK;
  topology.ep_size = 2;
  return topology;
}

std::int64_t tokens_of(std::int64_t pass) { return 1 + pass % 5; }

/// The id of (token, column) of `layer` in `pass`: exactly one out-of-range id per pass
/// (layer 0, token 0, column 0) and one -1 in the last token when there are several.
std::int32_t id_of(std::int64_t pass, std::int64_t layer, std::int64_t token, std::int64_t column) {
  if (layer == 0 && token == 0 && column == 0) return std::int32_t(kPhysical + pass % 3);
  if (token == tokens_of(pass) - 1 && token > 0 && column == 1) return -1;
  return std::int32_t((pass * 7 + layer * 3 + token * 5 + column) % kPhysical);
}

/// Placement version v: slot p of layer l holds (p + v + l) % E; version 0 is trivial.
std::int32_t logical_of(std::uint64_t version, std::int64_t layer, std::int64_t slot) {
  if (version == 0) return std::int32_t(slot % kLogical);
  return std::int32_t((slot + std::int64_t(version) + layer) % kLogical);
}

Placement placement_of(std::uint64_t version) {
  std::vector<std::int32_t> map;
  for (std::int64_t l = 0; l < kLayers; ++l)
    for (std::int64_t p = 0; p < kPhysical; ++p) map.push_back(logical_of(version, l, p));
  return Placement(kLayers, kPhysical, kLogical, map, version);
}

std::vector<std::int64_t> expected_physical(std::int64_t pass) {
  std::vector<std::int64_t> counts(std::size_t(kLayers * kPhysical), 0);
  for (std::int64_t l = 0; l < kLayers; ++l) {
    if (l == 1) continue;
    for (std::int64_t t = 0; t < tokens_of(pass); ++t)
      for (std::int64_t c = 0; c < kTopK; ++c) {
        const std::int32_t id = id_of(pass, l, t, c);
        if (id >= 0 && id < kPhysical) ++counts[std::size_t(l * kPhysical + id)];
      }
  }
  return counts;
}

std::vector<std::int64_t> expected_logical(std::int64_t pass, std::uint64_t version) {
  const std::vector<std::int64_t> physical = expected_physical(pass);
  std::vector<std::int64_t> logical(std::size_t(kLayers * kLogical), 0);
  for (std::int64_t l = 0; l < kLayers; ++l)
    for (std::int64_t p = 0; p < kPhysical; ++p)
      logical[std::size_t(l * kLogical + logical_of(version, l, p))] +=
          physical[std::size_t(l * kPhysical + p)];
  return logical;
}

/// [L, k] physical ids of token `token` of `pass` in a per-token trace.
std::vector<std::int32_t> expected_token(std::int64_t pass, std::int64_t token) {
  std::vector<std::int32_t> out;
  for (std::int64_t l = 0; l < kLayers; ++l)
    for (std::int64_t c = 0; c < kTopK; ++c) {
      const std::int32_t id = l == 1 ? -1 : id_of(pass, l, token, c);
      out.push_back(id >= 0 && id < kPhysical ? id : -1);
    }
  return out;
}

// ---- The two threads ----

/// Runs passes 1, 2, 3, ... until told to stop; publishes the last begun and ended ids.
class ForwardThread {
 public:
  explicit ForwardThread(Recorder& recorder) : recorder_(recorder), thread_([this] { run(); }) {}
  ~ForwardThread() {
    done_.store(true);
    thread_.join();
  }

  std::int64_t begun() const { return begun_.load(); }
  std::int64_t ended() const { return ended_.load(); }
  bool failed() const { return failed_.load(); }
  const std::string& failure() const { return failure_; }  // read after failed() is true

  /// Spins until `count` more passes have ended (or the thread failed).
  void wait_passes(std::int64_t count) const {
    const std::int64_t target = ended() + count;
    while (ended() < target && !failed()) std::this_thread::yield();
  }

 private:
  void run() {
    std::vector<std::int32_t> ids;
    try {
      for (std::int64_t pass = 1; !done_.load(); ++pass) {
        const std::int64_t tokens = tokens_of(pass);
        recorder_.begin_pass(pass);
        begun_.store(pass);
        for (std::int64_t l : {0, 2, 3}) {
          // Padding rows hold in-range ids that must not be counted.
          ids.assign(std::size_t((tokens + kPaddingRows) * kTopK), 0);
          for (std::int64_t t = 0; t < tokens; ++t)
            for (std::int64_t c = 0; c < kTopK; ++c)
              ids[std::size_t(t * kTopK + c)] = id_of(pass, l, t, c);
          const TensorView view =
              TensorView::contiguous(ids.data(), DType::kInt32, {tokens + kPaddingRows, kTopK});
          if (l == 2) {
            recorder_.record_topk(l, view, TensorView::contiguous(&tokens, DType::kInt64, {}));
          } else {
            recorder_.record_topk(l, view, tokens);
          }
        }
        recorder_.end_pass();
        ended_.store(pass);
      }
    } catch (const std::exception& error) {
      failure_ = error.what();
      failed_.store(true);
    }
  }

  Recorder& recorder_;
  std::atomic<bool> done_{false};
  std::atomic<bool> failed_{false};
  std::string failure_;
  std::atomic<std::int64_t> begun_{0};
  std::atomic<std::int64_t> ended_{0};
  std::thread thread_;
};

/// What the control thread knows about the current recording epoch.
struct Epoch {
  bool recording = false;
  std::int64_t floor = 0;  ///< Passes with ids <= floor began before the last start/reset.
  std::int64_t after = 0;  ///< Passes with ids >= after + 2 surely began after it.
};

enum class Op { kStart, kStop, kReset, kPlacement, kCheck };

// One cycle of control calls; the test repeats it.
constexpr Op kScript[] = {Op::kStart, Op::kCheck,     Op::kCheck, Op::kPlacement, Op::kCheck,
                          Op::kReset, Op::kCheck,     Op::kStop,  Op::kCheck,     Op::kReset,
                          Op::kCheck, Op::kPlacement, Op::kStart, Op::kCheck,     Op::kStop,
                          Op::kCheck, Op::kStart,     Op::kCheck, Op::kCheck,     Op::kCheck};
constexpr int kCycles = 12;

/// Runs the control script against a forward thread; `check` validates one snapshot given
/// the epoch and the id of a pass known to have ended before the snapshot was taken.
template <typename Check>
void run_stress(RecorderOptions options, Check check) {
  CpuRecorder recorder(stress_topology(), options);
  ForwardThread forward(recorder);
  Epoch epoch;
  std::uint64_t version = 0;
  std::int64_t snapshots = 0;
  for (int cycle = 0; cycle < kCycles && !forward.failed(); ++cycle) {
    for (Op op : kScript) {
      switch (op) {
        case Op::kStart:
        case Op::kReset: {
          epoch.floor = forward.begun();
          if (op == Op::kStart) {
            recorder.start();
            epoch.recording = true;
          } else {
            recorder.reset();
          }
          epoch.after = forward.begun();
          break;
        }
        case Op::kStop: {
          recorder.stop();
          epoch.recording = false;
          // Nothing may be committed from now on: the snapshot stays the same.
          const Snapshot before = recorder.snapshot();
          forward.wait_passes(3);
          const Snapshot later = recorder.snapshot();
          ASSERT_EQ(before.pass_ids, later.pass_ids);
          ASSERT_EQ(before.num_passes, later.num_passes);
          ASSERT_EQ(before.physical_counts, later.physical_counts);
          ASSERT_EQ(before.token_pass_ids, later.token_pass_ids);
          ASSERT_EQ(before.dropped_tokens, later.dropped_tokens);
          ASSERT_EQ(before.dropped_ids, later.dropped_ids);
          break;
        }
        case Op::kPlacement:
          recorder.set_placement(placement_of(++version));
          break;
        case Op::kCheck: {
          // Let 1 to 29 passes go by, so windows wrap and the token buffer overflows.
          forward.wait_passes(1 + (snapshots % 5) * 7);
          ASSERT_EQ(recorder.is_recording(), epoch.recording);
          const std::int64_t ended = forward.ended();
          const Snapshot snapshot = recorder.snapshot();
          ++snapshots;
          ASSERT_NO_FATAL_FAILURE(check(snapshot, epoch, ended, version))
              << "cycle " << cycle << " snapshot " << snapshots;
          break;
        }
      }
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  ASSERT_FALSE(forward.failed()) << forward.failure();
}

/// `ended` value for check_pass_ids when no pass is known to be in the snapshot.
constexpr std::int64_t kNoPassKnown = -1;

/// Checks the pass ids of a snapshot: consecutive, all begun after the epoch started, and
/// (while recording) reaching `ended`, the last pass known to have ended before it.
void check_pass_ids(const std::vector<std::int64_t>& ids, const Epoch& epoch, std::int64_t ended) {
  for (std::size_t i = 1; i < ids.size(); ++i) ASSERT_EQ(ids[i], ids[i - 1] + 1) << "row " << i;
  if (!ids.empty()) {
    ASSERT_GT(ids.front(), epoch.floor);
  }
  if (epoch.recording && ended != kNoPassKnown && ended >= epoch.after + 2) {
    ASSERT_FALSE(ids.empty());
    ASSERT_GE(ids.back(), ended);
  }
}

TEST(CpuRecorderStress, StatSnapshotsHoldOnlyWholePasses) {
  RecorderOptions options;
  options.mode = RecordMode::kStat;
  options.window_size = 16;
  run_stress(options, [](const Snapshot& snapshot, const Epoch& epoch, std::int64_t ended,
                         std::uint64_t version) {
    const std::int64_t rows = snapshot.window_size();
    ASSERT_NO_FATAL_FAILURE(check_pass_ids(snapshot.pass_ids, epoch, ended));
    ASSERT_LE(rows, 16);
    ASSERT_GE(snapshot.num_passes, rows);
    if (snapshot.num_passes <= 16) {
      ASSERT_EQ(rows, snapshot.num_passes);
    }
    ASSERT_EQ(snapshot.dropped_ids, snapshot.num_passes);  // one dropped id per pass
    ASSERT_EQ(std::int64_t(snapshot.physical_counts.size()), rows * kLayers * kPhysical);
    ASSERT_EQ(std::int64_t(snapshot.logical_counts.size()), rows * kLayers * kLogical);
    std::vector<std::int64_t> physical_totals(std::size_t(kLayers * kPhysical), 0);
    std::vector<std::int64_t> logical_totals(std::size_t(kLayers * kLogical), 0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t pass = snapshot.pass_ids[std::size_t(r)];
      const std::uint64_t row_version = snapshot.placement_versions[std::size_t(r)];
      ASSERT_LE(row_version, version);
      if (r > 0) {
        ASSERT_GE(row_version, snapshot.placement_versions[std::size_t(r - 1)]);
      }
      ASSERT_EQ(snapshot.pass_num_tokens[std::size_t(r)], tokens_of(pass));
      const auto physical_begin = snapshot.physical_counts.begin() + r * kLayers * kPhysical;
      const std::vector<std::int64_t> physical(physical_begin,
                                               physical_begin + kLayers * kPhysical);
      ASSERT_EQ(physical, expected_physical(pass)) << "pass " << pass;
      const auto logical_begin = snapshot.logical_counts.begin() + r * kLayers * kLogical;
      const std::vector<std::int64_t> logical(logical_begin, logical_begin + kLayers * kLogical);
      ASSERT_EQ(logical, expected_logical(pass, row_version)) << "pass " << pass;
      for (std::size_t i = 0; i < physical.size(); ++i) physical_totals[i] += physical[i];
      for (std::size_t i = 0; i < logical.size(); ++i) logical_totals[i] += logical[i];
    }
    ASSERT_EQ(snapshot.physical_totals(), physical_totals);
    ASSERT_EQ(snapshot.logical_totals(), logical_totals);
  });
}

constexpr std::int64_t kCapacity = 64;  // per-token tokens: overflows after about 20 passes

TEST(CpuRecorderStress, PerTokenSnapshotsHoldOnlyWholePasses) {
  RecorderOptions options;
  options.mode = RecordMode::kPerToken;
  options.per_token_capacity = kCapacity;
  run_stress(options, [](const Snapshot& snapshot, const Epoch& epoch, std::int64_t ended,
                         std::uint64_t version) {
    const std::int64_t kept = snapshot.num_tokens();
    ASSERT_LE(kept, kCapacity);
    ASSERT_EQ(std::int64_t(snapshot.token_physical_ids.size()), kept * kLayers * kTopK);
    // Split the kept tokens into runs of one pass each.
    std::vector<std::int64_t> passes;
    std::int64_t token = 0;
    while (token < kept) {
      const std::int64_t pass = snapshot.token_pass_ids[std::size_t(token)];
      const std::uint64_t pass_version = snapshot.token_placement_versions[std::size_t(token)];
      ASSERT_LE(pass_version, version);
      std::int64_t t = 0;
      for (; token < kept && snapshot.token_pass_ids[std::size_t(token)] == pass; ++t, ++token) {
        ASSERT_EQ(snapshot.token_placement_versions[std::size_t(token)], pass_version);
        const auto first = snapshot.token_physical_ids.begin() + token * kLayers * kTopK;
        const std::vector<std::int32_t> ids(first, first + kLayers * kTopK);
        const std::vector<std::int32_t> expected = expected_token(pass, t);
        ASSERT_EQ(ids, expected) << "pass " << pass << " token " << t;
        for (std::int64_t i = 0; i < kLayers * kTopK; ++i) {
          const std::int32_t logical =
              snapshot.token_logical_ids[std::size_t(token * kLayers * kTopK + i)];
          const std::int32_t id = expected[std::size_t(i)];
          ASSERT_EQ(logical, id < 0 ? -1 : logical_of(pass_version, i / kTopK, id));
        }
      }
      // Only the pass that hit the capacity may have lost tokens.
      if (token < kept || kept < kCapacity) {
        ASSERT_EQ(t, tokens_of(pass)) << "pass " << pass;
      }
      passes.push_back(pass);
    }
    ASSERT_NO_FATAL_FAILURE(check_pass_ids(passes, epoch, kNoPassKnown));
    // Committed passes are consecutive from the first kept one; what did not fit is counted.
    if (passes.empty()) {
      ASSERT_EQ(snapshot.num_passes, 0);
    } else {
      std::int64_t total = 0;
      for (std::int64_t i = 0; i < snapshot.num_passes; ++i) total += tokens_of(passes[0] + i);
      ASSERT_EQ(snapshot.dropped_tokens, total - kept);
      ASSERT_GE(snapshot.num_passes, std::int64_t(passes.size()));
      if (kept < kCapacity) {
        ASSERT_EQ(snapshot.num_passes, std::int64_t(passes.size()));
        ASSERT_NO_FATAL_FAILURE(check_pass_ids(passes, epoch, ended));
      }
    }
    ASSERT_EQ(snapshot.dropped_ids, snapshot.num_passes);
  });
}

}  // namespace
}  // namespace moestat
