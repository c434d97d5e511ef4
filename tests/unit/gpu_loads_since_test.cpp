// Recorder::gpu_loads_since on the CPU recorder: each read equals a naive recomputation from
// passes_since of the same arrivals (GPU loads, balancedness, logical totals, header), for two
// GPU counts, across the window's wrap-around, a placement change, missed passes and a reset;
// hand counts; and the errors for a bad GPU count or a mode without a pass window.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <moestat/gpu_loads.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <random>
#include <vector>

#include "unit/expect_error.hpp"
#include "unit/random_passes.hpp"

namespace moestat {
namespace {

using record::CpuRecorder;

using namespace test::random_passes;

/// The naive reference: what gpu_loads_since must return for the read `passes`.
GpuLoadsSince recompute(const PassesSince& passes, std::int64_t num_gpus) {
  GpuLoadsSince expected;
  expected.num_layers = passes.num_layers;
  expected.num_logical_experts = passes.num_logical_experts;
  expected.num_gpus = num_gpus;
  expected.generation = passes.generation;
  expected.first_arrival = passes.first_arrival;
  expected.missed_passes = passes.missed_passes;
  expected.pass_ids = passes.pass_ids;
  expected.placement_versions = passes.placement_versions;
  expected.pass_num_tokens = passes.pass_num_tokens;
  expected.num_passes = passes.num_passes;
  expected.dropped_ids = passes.dropped_ids;
  expected.dropped_passes = passes.dropped_passes;
  const std::int64_t per_gpu = kSlots / num_gpus;
  for (std::int64_t pass = 0; pass < passes.size(); ++pass) {
    double score_sum = 0.0;
    for (std::int64_t layer = 0; layer < kLayers; ++layer) {
      std::vector<std::int64_t> loads(std::size_t(num_gpus), 0);
      for (std::int64_t slot = 0; slot < kSlots; ++slot) {
        loads[std::size_t(slot / per_gpu)] +=
            passes.physical_counts[std::size_t((pass * kLayers + layer) * kSlots + slot)];
      }
      double mean = 0.0;
      for (const std::int64_t load : loads) mean += double(load) / double(num_gpus);
      const double max = double(*std::max_element(loads.begin(), loads.end()));
      score_sum += (mean + 1e-5) / (max + 1e-5);
      expected.gpu_loads.insert(expected.gpu_loads.end(), loads.begin(), loads.end());
    }
    expected.balancedness.push_back(score_sum / double(kLayers));
  }
  expected.logical_totals.assign(std::size_t(kLayers * kExperts), 0);
  for (std::size_t cell = 0; cell < passes.logical_counts.size(); ++cell) {
    expected.logical_totals[cell % expected.logical_totals.size()] += passes.logical_counts[cell];
  }
  return expected;
}

/// `actual` equals `expected`; balancedness within rounding (the reference sums differently).
void expect_same_loads(const GpuLoadsSince& expected, const GpuLoadsSince& actual) {
  ASSERT_EQ(actual.balancedness.size(), expected.balancedness.size());
  for (std::size_t pass = 0; pass < expected.balancedness.size(); ++pass) {
    EXPECT_NEAR(actual.balancedness[pass], expected.balancedness[pass], 1e-12) << pass;
  }
  GpuLoadsSince same_balancedness = actual;
  same_balancedness.balancedness = expected.balancedness;
  EXPECT_EQ(same_balancedness, expected);
}

TEST(GpuLoadsSince, EqualsARecomputationFromPassesSince) {
  CpuRecorder recorder(topology(), {.mode = RecordMode::kStat, .window_size = 5});
  recorder.start();
  std::mt19937_64 rng(11);
  // One reader per GPU count, each following the recorder on its own.
  const std::vector<std::int64_t> gpu_counts = {2, 6};
  std::vector<GpuLoadsSince> reads(gpu_counts.size());
  std::int64_t rows_read = 0, passes_missed = 0;
  for (std::int64_t pass = 0; pass < 24; ++pass) {
    if (pass == 6) {  // experts 1 and 2 swap slots: logical totals follow each pass's version
      recorder.set_placement(Placement(kLayers, kSlots, kExperts,
                                       {0, 2, 1, 3, 0, 1, 0, 2, 1, 3, 0, 1, 0, 2, 1, 3, 0, 1}, 1));
    }
    if (pass == 17) recorder.reset();  // a new generation: read from its arrival 0
    run_pass(recorder, rng, 100 + pass, 1 + pass % 4);
    // Reads after 3 passes, after more than the window (missed passes), after none, at the
    // placement change and after the reset.
    for (const std::int64_t read_at : {2, 4, 12, 13, 16, 19, 23}) {
      if (pass != read_at) continue;
      SCOPED_TRACE(pass);
      for (std::size_t reader = 0; reader < gpu_counts.size(); ++reader) {
        const GpuLoadsSince previous = reads[reader];
        const PassesSince rows =
            recorder.passes_since(previous.generation, previous.next_arrival());
        reads[reader] = recorder.gpu_loads_since(previous.generation, previous.next_arrival(),
                                                 gpu_counts[reader]);
        expect_same_loads(recompute(rows, gpu_counts[reader]), reads[reader]);
        if (reader == 0) {
          rows_read += reads[reader].size();
          passes_missed += reads[reader].missed_passes;
        }
      }
      // A second read before another pass finds nothing new.
      const GpuLoadsSince again =
          recorder.gpu_loads_since(reads[0].generation, reads[0].next_arrival(), 2);
      EXPECT_EQ(again.size(), 0);
      EXPECT_EQ(again.logical_totals,
                std::vector<std::int64_t>(std::size_t(kLayers * kExperts), 0));
    }
  }
  // Arrivals 0-16 of the first generation and 0-6 of the second: every pass read or missed.
  EXPECT_EQ(rows_read + passes_missed, 17 + 7);
  EXPECT_GT(passes_missed, 0);
  EXPECT_EQ(reads[0].next_arrival(), 7);
}

TEST(GpuLoadsOfCounts, SumsEachRowsSlotsByGpuInOrder) {
  // Two rows of 6 slots on 3 GPUs of 2 slots each.
  const std::vector<std::int64_t> counts = {1, 2, 3, 4, 5, 6, 0, 0, 7, 0, 0, 9};
  EXPECT_EQ(gpu_loads_of_counts(counts, 6, 3), (std::vector<std::int64_t>{3, 7, 11, 0, 7, 9}));
  EXPECT_EQ(gpu_loads_of_counts(counts, 6, 1), (std::vector<std::int64_t>{21, 16}));
  EXPECT_EQ(gpu_loads_of_counts(counts, 6, 6), counts);
  EXPECT_MOESTAT_ERROR(gpu_loads_of_counts(counts, 6, 4),
                       "4 GPUs cannot share 6 physical expert slots evenly");
  EXPECT_MOESTAT_ERROR(gpu_loads_of_counts(counts, 5, 1), "12 counts do not fill rows of 5 slots");
  const std::vector<std::int64_t> huge = {std::int64_t(1) << 62, std::int64_t(1) << 62};
  EXPECT_MOESTAT_ERROR(gpu_loads_of_counts(huge, 2, 1), "a GPU load");
}

TEST(GpuLoadsSince, HandCounts) {
  CpuRecorder recorder(topology(), {.mode = RecordMode::kPerPass});
  recorder.start();
  recorder.begin_pass(7);
  const std::vector<std::int64_t> ids = {0, 3, 0, 5};  // two tokens: slots 0, 3, 0, 5
  for (std::int64_t layer = 0; layer < kLayers; ++layer) {
    if (layer == 1) continue;  // a layer without tokens scores 1
    recorder.record_topk(layer, TensorView::contiguous(ids.data(), DType::kInt64, {2, kTopK}));
  }
  recorder.end_pass();

  const GpuLoadsSince two = recorder.gpu_loads_since(0, 0, 2);  // slots 0-2 | 3-5
  EXPECT_EQ(two.pass_ids, std::vector<std::int64_t>{7});
  EXPECT_EQ(two.gpu_loads, (std::vector<std::int64_t>{2, 2, 0, 0, 2, 2}));
  EXPECT_DOUBLE_EQ(two.balancedness[0], 1.0);
  const GpuLoadsSince six = recorder.gpu_loads_since(0, 0, 6);
  EXPECT_EQ(six.gpu_loads,
            (std::vector<std::int64_t>{2, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 2, 0, 0, 1, 0, 1}));
  const double busy = (4.0 / 6.0 + 1e-5) / (2.0 + 1e-5);
  EXPECT_DOUBLE_EQ(six.balancedness[0], (busy + 1.0 + busy) / 3.0);
  // The trivial placement: slot p holds expert p % 4, so slot 5 counts for expert 1.
  EXPECT_EQ(six.logical_totals, (std::vector<std::int64_t>{2, 1, 0, 1, 0, 0, 0, 0, 2, 1, 0, 1}));
  EXPECT_EQ(six.num_gpus, 6);
  EXPECT_EQ(six.num_passes, 1);
}

TEST(GpuLoadsSince, RefusesABadGpuCountOrAModeWithoutPasses) {
  CpuRecorder recorder(topology(), {.mode = RecordMode::kStat});
  EXPECT_MOESTAT_ERROR(recorder.gpu_loads_since(0, 0, 0),
                       "gpu_loads_since: the number of GPUs must be at least 1, not 0");
  EXPECT_MOESTAT_ERROR(recorder.gpu_loads_since(0, 0, -2), "at least 1, not -2");
  EXPECT_MOESTAT_ERROR(recorder.gpu_loads_since(0, 0, 4),
                       "gpu_loads_since: 4 GPUs cannot share 6 physical expert slots evenly");
  EXPECT_MOESTAT_ERROR(recorder.gpu_loads_since(0, 1, 2), "arrival 1 is outside the 0 passes");
  CpuRecorder decayed(topology(), {.mode = RecordMode::kDecayed});
  EXPECT_MOESTAT_ERROR(decayed.gpu_loads_since(0, 0, 2),
                       "gpu_loads_since needs a recorder that keeps passes (stat, stat_approx or "
                       "per_pass), not decayed");
}

}  // namespace
}  // namespace moestat
