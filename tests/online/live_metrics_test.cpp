// online::LiveMetrics on the CPU recorder: every metric equals a naive recomputation from the
// same snapshot (the reference at the top), across updates that see every pass, some passes
// or a restarted recorder; the coverage check names a layer whose hook was skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <moestat/online/live_metrics.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <random>
#include <string>
#include <vector>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

using online::LiveMetrics;
using online::MetricValues;
using record::CpuRecorder;

// ---- The reference: straight from a snapshot's window rows, no shared code. ----

/// [L, G] GPU loads of window row `row`: slot p on GPU p / (P / G).
std::vector<std::int64_t> reference_gpu_loads(const Snapshot& snapshot, std::int64_t row,
                                              std::int64_t num_gpus) {
  const std::int64_t L = snapshot.num_layers, P = snapshot.num_physical_experts;
  std::vector<std::int64_t> loads(std::size_t(L * num_gpus), 0);
  for (std::int64_t layer = 0; layer < L; ++layer) {
    for (std::int64_t gpu = 0; gpu < num_gpus; ++gpu) {
      for (std::int64_t slot = gpu * (P / num_gpus); slot < (gpu + 1) * (P / num_gpus); ++slot) {
        loads[std::size_t(layer * num_gpus + gpu)] +=
            snapshot.physical_counts[std::size_t((row * L + layer) * P + slot)];
      }
    }
  }
  return loads;
}

/// SGLang: mean over all layers of (mean GPU load + 1e-5) / (max GPU load + 1e-5).
double reference_balancedness(const std::vector<std::int64_t>& loads, std::int64_t num_gpus) {
  const std::size_t L = loads.size() / std::size_t(num_gpus);
  double sum = 0.0;
  for (std::size_t layer = 0; layer < L; ++layer) {
    double total = 0.0, max = 0.0;
    for (std::size_t gpu = 0; gpu < std::size_t(num_gpus); ++gpu) {
      total += double(loads[layer * std::size_t(num_gpus) + gpu]);
      max = std::max(max, double(loads[layer * std::size_t(num_gpus) + gpu]));
    }
    sum += (total / double(num_gpus) + 1e-5) / (max + 1e-5);
  }
  return sum / double(L);
}

double mean_of_last(const std::vector<double>& values, std::size_t count) {
  count = std::min(count, values.size());
  double sum = 0.0;
  for (std::size_t i = values.size() - count; i < values.size(); ++i) sum += values[i];
  return count == 0 ? 0.0 : sum / double(count);
}

// ---- Workload ----

constexpr std::int64_t kLayers = 5, kExperts = 6, kSlots = 8, kTopK = 2, kGpus = 4;

/// Layer 0 dense; 8 slots over 4 GPUs, experts 0 and 1 replicated (the trivial placement).
ModelTopology topology() {
  ModelTopology topology = ModelTopology::uniform(kLayers, kExperts, kTopK);
  topology.moe_layers[0] = false;
  topology.num_physical_experts = kSlots;
  topology.ep_size = kGpus;
  return topology;
}

/// One pass: `rows` tokens of random ids on every MoE layer but `skipped` (-1: none), some
/// ids out of range.
void run_pass(CpuRecorder& recorder, std::mt19937_64& rng, std::int64_t pass_id, std::int64_t rows,
              std::int64_t skipped = -1) {
  std::uniform_int_distribution<std::int64_t> id(-1, kSlots);  // -1 padding, kSlots dropped
  recorder.begin_pass(pass_id);
  for (std::int64_t layer = 1; layer < kLayers; ++layer) {
    if (layer == skipped) continue;
    std::vector<std::int64_t> ids(std::size_t(rows * kTopK));
    // Layer-dependent skew so layers and passes differ in balance.
    for (auto& value : ids) value = std::min(id(rng), id(rng) + layer % 2);
    recorder.record_topk(layer, TensorView::contiguous(ids.data(), DType::kInt64, {rows, kTopK}));
  }
  recorder.end_pass();
}

class LiveMetricsTest : public ::testing::Test {
 protected:
  LiveMetricsTest() : recorder_(topology(), {.mode = RecordMode::kStat, .window_size = 40}) {
    recorder_.start();
  }
  CpuRecorder recorder_;
  std::mt19937_64 rng_{17};
};

TEST_F(LiveMetricsTest, EqualsARecomputationFromTheSnapshot) {
  LiveMetrics metrics(recorder_);
  for (std::int64_t pass = 0; pass < 23; ++pass)
    run_pass(recorder_, rng_, 100 + pass, 1 + pass % 7);
  const MetricValues values = metrics.update();
  const Snapshot snapshot = recorder_.snapshot();

  ASSERT_EQ(snapshot.window_size(), 23);
  std::vector<double> balancedness;
  std::vector<std::int64_t> totals(std::size_t(kLayers * kGpus), 0), last;
  for (std::int64_t row = 0; row < 23; ++row) {
    last = reference_gpu_loads(snapshot, row, kGpus);
    for (std::size_t i = 0; i < last.size(); ++i) totals[i] += last[i];
    balancedness.push_back(reference_balancedness(last, kGpus));
  }
  EXPECT_EQ(values.num_gpus, kGpus);
  EXPECT_EQ(values.passes_recorded, 23);
  EXPECT_EQ(values.passes_observed, 23);
  EXPECT_EQ(values.passes_unobserved, 0);
  EXPECT_EQ(values.last_pass_id, 122);
  EXPECT_EQ(values.last_pass_gpu_loads, last);
  EXPECT_EQ(values.gpu_assignments_total, totals);
  EXPECT_NEAR(values.last_pass_balancedness, balancedness.back(), 1e-12);
  EXPECT_LT(values.last_pass_balancedness, 1.0);  // the workload is skewed
  ASSERT_EQ(values.balancedness_means.size(), 3u);
  for (const online::BalancednessMean& mean : values.balancedness_means) {
    SCOPED_TRACE(mean.window);
    EXPECT_EQ(mean.num_passes, std::min<std::int64_t>(mean.window, 23));
    EXPECT_NEAR(mean.value, mean_of_last(balancedness, std::size_t(mean.window)), 1e-12);
  }
  EXPECT_NE(values.balancedness_means[0].value, values.balancedness_means[1].value);
  EXPECT_EQ(values.dropped_ids, snapshot.dropped_ids);
  EXPECT_GT(values.dropped_ids, 0);
  EXPECT_EQ(values.uncovered_passes, std::vector<std::int64_t>(kLayers, 0));
}

TEST_F(LiveMetricsTest, HottestExpertsAreTheLargestLogicalTotalsOfTheObservedPasses) {
  // A window of 5 and updates every 4 passes: every pass is observed, most of them have left
  // the window by the last update, and still count.
  CpuRecorder small(topology(), {.mode = RecordMode::kStat, .window_size = 5});
  small.start();
  LiveMetrics metrics(small, {.num_hottest_experts = 7});
  std::vector<std::int64_t> totals(std::size_t(kLayers * kExperts), 0);  // [L, E]
  MetricValues values;
  for (std::int64_t update = 0; update < 3; ++update) {
    for (std::int64_t pass = 0; pass < 4; ++pass) run_pass(small, rng_, pass, 3 + update);
    values = metrics.update();
    const Snapshot snapshot = small.snapshot();
    const auto first = snapshot.logical_counts.end() - 4 * kLayers * kExperts;
    for (std::size_t cell = 0; cell < totals.size(); ++cell) {
      for (auto row = first; row != snapshot.logical_counts.end(); row += kLayers * kExperts)
        totals[cell] += row[std::ptrdiff_t(cell)];
    }
  }
  ASSERT_EQ(values.passes_unobserved, 0);
  std::vector<online::HotExpert> expected;
  for (std::int64_t cell = 0; cell < kLayers * kExperts; ++cell) {
    if (totals[std::size_t(cell)] > 0)
      expected.push_back({cell / kExperts, cell % kExperts, totals[std::size_t(cell)]});
  }
  std::stable_sort(expected.begin(), expected.end(),
                   [](const auto& a, const auto& b) { return a.assignments > b.assignments; });
  expected.resize(7);
  EXPECT_EQ(values.hottest_experts, expected);
}

TEST_F(LiveMetricsTest, FoldsOnlyNewPassesAndCountsThoseThatLeftTheWindow) {
  CpuRecorder small(topology(), {.mode = RecordMode::kStat, .window_size = 3});
  small.start();
  LiveMetrics metrics(small);
  std::vector<double> balancedness;
  const auto note_window = [&](std::int64_t new_rows) {
    const Snapshot snapshot = small.snapshot();
    for (std::int64_t row = snapshot.window_size() - new_rows; row < snapshot.window_size(); ++row)
      balancedness.push_back(
          reference_balancedness(reference_gpu_loads(snapshot, row, kGpus), kGpus));
  };
  for (std::int64_t pass = 0; pass < 2; ++pass) run_pass(small, rng_, pass, 5);
  metrics.update();
  note_window(2);
  for (std::int64_t pass = 2; pass < 7; ++pass) run_pass(small, rng_, pass, 3 + pass);
  const MetricValues values = metrics.update();
  note_window(3);  // passes 2 and 3 left the window of 3 unseen
  EXPECT_EQ(values.passes_recorded, 7);
  EXPECT_EQ(values.passes_observed, 5);
  EXPECT_EQ(values.passes_unobserved, 2);
  EXPECT_EQ(values.last_pass_id, 6);
  EXPECT_NEAR(values.balancedness_means[0].value, mean_of_last(balancedness, 10), 1e-12);
  EXPECT_EQ(values.balancedness_means[0].num_passes, 5);

  // An update with no new pass changes nothing; a restart's passes are all new.
  EXPECT_EQ(metrics.update().passes_observed, 5);
  small.start();
  run_pass(small, rng_, 50, 4);
  const MetricValues restarted = metrics.update();
  EXPECT_EQ(restarted.passes_recorded, 1);
  EXPECT_EQ(restarted.passes_observed, 6);
  EXPECT_EQ(restarted.last_pass_id, 50);
}

TEST_F(LiveMetricsTest, CoverageNamesTheLayerWhoseHookWasSkipped) {
  LiveMetrics metrics(recorder_, {.layer_names = {"embed", "blocks.1.moe", "blocks.2.moe",
                                                  "blocks.3.moe", "blocks.4.moe"}});
  run_pass(recorder_, rng_, 0, 6);
  run_pass(recorder_, rng_, 1, 6, /*skipped=*/3);
  run_pass(recorder_, rng_, 2, 6, /*skipped=*/3);
  recorder_.begin_pass(3);  // a pass with no tokens at all names no layer
  recorder_.end_pass();
  const MetricValues values = metrics.update();
  EXPECT_EQ(values.uncovered_passes, (std::vector<std::int64_t>{0, 0, 0, 2, 0}));
  EXPECT_EQ(values.uncovered_layers(), std::vector<std::string>{"blocks.3.moe"});
  EXPECT_DOUBLE_EQ(values.last_pass_balancedness, 1.0);  // empty layers score 1
}

TEST_F(LiveMetricsTest, RefusesWhatItCannotMeasure) {
  CpuRecorder decayed(topology(), {.mode = RecordMode::kDecayed});
  EXPECT_MOESTAT_ERROR(LiveMetrics{decayed},
                       "that keeps passes (stat, stat_approx or per_pass), not decayed");
  EXPECT_MOESTAT_ERROR(LiveMetrics(recorder_, {.num_gpus = 3}), "3 GPUs cannot share 8 physical");
  EXPECT_MOESTAT_ERROR(LiveMetrics(recorder_, {.layer_names = {"a", "b"}}),
                       "2 layer names given for a model of 5 layers");
  EXPECT_MOESTAT_ERROR(LiveMetrics(recorder_, {.num_hottest_experts = -1}), "must be >= 0");
}

TEST(PassBalancedness, IsSGLangsMeanOfLayerUtilisation) {
  // Layer 0: loads 1, 3 -> (2 + e) / (3 + e); layer 1 empty -> 1.
  const double expected = ((2 + 1e-5) / (3 + 1e-5) + 1.0) / 2;
  EXPECT_DOUBLE_EQ(online::pass_balancedness(std::vector<std::int64_t>{1, 3, 0, 0}, 2), expected);
  EXPECT_MOESTAT_ERROR(online::pass_balancedness(std::vector<std::int64_t>{1, 2, 3}, 2),
                       "do not fill rows of 2 GPUs");
}

}  // namespace
}  // namespace moestat
