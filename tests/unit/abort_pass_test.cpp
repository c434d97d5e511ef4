// Recorder::abort_pass on the CPU backend: an aborted pass leaves no trace in any mode (the
// recorder fed only the other passes is the reference), and the hook is checked like the
// others.
#include <gtest/gtest.h>

#include <cstdint>
#include <moestat/record/cpu_recorder.hpp>
#include <random>
#include <vector>

#include "unit/expect_error.hpp"
#include "unit/snapshot_expectations.hpp"

namespace moestat {
namespace {

using record::CpuRecorder;

constexpr std::int64_t kTopK = 2;

/// One pass of random ids (padding and out-of-range ids included) on every given recorder.
void pass_on(std::mt19937_64& rng, std::int64_t pass_id, std::vector<CpuRecorder*> recorders,
             bool abort) {
  std::uniform_int_distribution<std::int64_t> id(-2, 9);
  const std::int64_t rows = 3 + pass_id;
  std::vector<std::int64_t> ids(std::size_t(rows * kTopK));
  for (auto& value : ids) value = id(rng);
  const TensorView view = TensorView::contiguous(ids.data(), DType::kInt64, {rows, kTopK});
  for (CpuRecorder* recorder : recorders) {
    recorder->begin_pass(pass_id);
    recorder->record_topk(1, view);
    recorder->record_topk(2, view, rows - 1);
    if (abort) {
      recorder->abort_pass();
    } else {
      recorder->end_pass();
    }
  }
}

TEST(AbortPass, LeavesNoTraceInAnyMode) {
  const ModelTopology topology = ModelTopology::uniform(3, 8, kTopK);
  for (RecordMode mode :
       {RecordMode::kStat, RecordMode::kPerPass, RecordMode::kPerToken, RecordMode::kDecayed}) {
    SCOPED_TRACE(std::string(record_mode_name(mode)));
    const RecorderOptions options{.mode = mode, .window_size = 8, .decay = 0.5};
    CpuRecorder aborting(topology, options);
    CpuRecorder reference(topology, options);
    aborting.start();
    reference.start();
    std::mt19937_64 rng(5);
    pass_on(rng, 0, {&aborting, &reference}, false);
    pass_on(rng, 1, {&aborting}, true);
    pass_on(rng, 2, {&aborting, &reference}, false);
    const Snapshot expected = reference.snapshot();
    const Snapshot actual = aborting.snapshot();
    test::expect_same_window(expected, actual);
    EXPECT_EQ(actual.token_physical_ids, expected.token_physical_ids);
    EXPECT_EQ(actual.decayed_physical_load, expected.decayed_physical_load);
  }
}

TEST(AbortPass, NeedsAnOpenPassAndIsIgnoredWhereHooksAre) {
  CpuRecorder recorder(ModelTopology::uniform(3, 8, kTopK), {.mode = RecordMode::kStat});
  EXPECT_MOESTAT_ERROR(recorder.abort_pass(), "abort_pass without begin_pass");
  recorder.begin_pass(0);
  recorder.abort_pass();
  EXPECT_MOESTAT_ERROR(recorder.end_pass(), "end_pass without begin_pass");
  {
    const DisabledRegion draft = recorder.disabled_region();
    recorder.abort_pass();  // ignored like every hook in the region
  }
  recorder.begin_pass(1);  // the aborted pass is closed: a new one opens
  recorder.end_pass();
}

}  // namespace
}  // namespace moestat
