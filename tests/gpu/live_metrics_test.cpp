// online::LiveMetrics on the CUDA recorder: updates read its snapshots while passes are
// recorded on a stream, and every metric equals LiveMetrics of the CPU recorder fed the same
// ids (the reference; tests/online/live_metrics_test.cpp checks that one against a naive
// recomputation). Updates between passes see the passes the stream has run.
#include <moestat/online/live_metrics.hpp>

#include "gpu/paired_recorders.hpp"

namespace moestat::test {
namespace {

using online::LiveMetrics;
using online::MetricValues;

void expect_same_metrics(const MetricValues& expected, const MetricValues& actual) {
  EXPECT_EQ(actual.passes_recorded, expected.passes_recorded);
  EXPECT_EQ(actual.passes_observed, expected.passes_observed);
  EXPECT_EQ(actual.passes_unobserved, expected.passes_unobserved);
  EXPECT_EQ(actual.dropped_ids, expected.dropped_ids);
  EXPECT_EQ(actual.last_pass_id, expected.last_pass_id);
  EXPECT_EQ(actual.last_pass_gpu_loads, expected.last_pass_gpu_loads);
  EXPECT_EQ(actual.gpu_assignments_total, expected.gpu_assignments_total);
  EXPECT_EQ(actual.last_pass_balancedness, expected.last_pass_balancedness);
  ASSERT_EQ(actual.balancedness_means.size(), expected.balancedness_means.size());
  for (std::size_t i = 0; i < expected.balancedness_means.size(); ++i) {
    EXPECT_EQ(actual.balancedness_means[i].num_passes, expected.balancedness_means[i].num_passes);
    EXPECT_EQ(actual.balancedness_means[i].value, expected.balancedness_means[i].value);
  }
  EXPECT_EQ(actual.uncovered_passes, expected.uncovered_passes);
  EXPECT_EQ(actual.hottest_experts, expected.hottest_experts);
}

TEST(CudaLiveMetrics, EqualThoseOfTheCpuRecorder) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  // stat: a window of 16, so some passes leave it between updates; per_pass: the collector's
  // ring holds every pass, so no pass is dropped whenever its thread runs.
  for (RecordMode mode : {RecordMode::kStat, RecordMode::kPerPass}) {
    SCOPED_TRACE(std::string(record_mode_name(mode)));
    PairedRecorders recorders(topology, {.mode = mode, .window_size = 16});
    LiveMetrics cpu_metrics(recorders.cpu(), {.num_hottest_experts = 20});
    LiveMetrics gpu_metrics(recorders.gpu(), {.num_hottest_experts = 20});
    recorders.start();

    std::mt19937_64 rng(3);
    for (std::int64_t pass = 0; pass < 37; ++pass) {
      // Awkward sizes, one token included. Layer 7 is skipped in every fifth pass: the
      // coverage check must name it on both.
      recorders.record_pass(pass, 1 + (pass * 13) % 29, rng,
                            [&](std::int64_t layer) { return layer != 7 || pass % 5 != 0; });
      // Updates after one pass, after more passes than the window of 16 holds, after none.
      if (pass == 3 || pass == 30 || pass == 31 || pass == 36) {
        SCOPED_TRACE(pass);
        expect_same_metrics(cpu_metrics.update(), gpu_metrics.update());
      }
    }
    const MetricValues values = gpu_metrics.update();
    EXPECT_EQ(values.uncovered_layers(), std::vector<std::string>{"7"});
    EXPECT_EQ(values.passes_dropped, 0);
    EXPECT_EQ(values.passes_unobserved > 0, mode == RecordMode::kStat);
  }
}

}  // namespace
}  // namespace moestat::test
