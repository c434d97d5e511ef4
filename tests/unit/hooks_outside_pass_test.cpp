// Recorder's rule for layer hooks while no pass is open: an error unless the backend accepts
// them (CudaRecorder does while its stream is being captured); the backend is asked only
// then, and every other check of the hook still applies. CpuRecorder never accepts them
// (recorder_hooks_test.cpp, HookOutsideAPassIsAnError).
#include <gtest/gtest.h>

#include <cstdint>
#include <moestat/recorder.hpp>
#include <vector>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

/// A backend that counts what reaches it and accepts hooks outside a pass when told to.
class DeferringRecorder final : public Recorder {
 public:
  using Recorder::Recorder;

  bool accepting = false;
  mutable int questions = 0;  // calls of accepts_hooks_outside_pass
  int topk_calls = 0;
  int local_count_calls = 0;

  void start() override {}
  void stop() override {}
  void reset() override {}
  bool is_recording() const override { return true; }
  Snapshot snapshot() const override { return {}; }
  PassesSince passes_since(std::uint64_t, std::int64_t) const override { return {}; }
  void set_placement(const Placement&) override {}

 protected:
  void do_begin_pass(std::int64_t) override {}
  void do_record_topk(std::int64_t, const TensorView&, std::int64_t) override { ++topk_calls; }
  void do_record_topk(std::int64_t, const TensorView&, const TensorView&) override { ++topk_calls; }
  void do_record_local_counts(std::int64_t, const TensorView&, std::int64_t) override {
    ++local_count_calls;
  }
  void do_end_pass() override {}
  void do_abort_pass() override {}
  bool accepts_hooks_outside_pass() const override {
    ++questions;
    return accepting;
  }
};

ModelTopology test_topology() {
  ModelTopology topology = ModelTopology::uniform(3, 4, 2);
  topology.moe_layers = std::vector<bool>{false, true, true};
  return topology;
}

class HooksOutsidePass : public ::testing::Test {
 protected:
  DeferringRecorder recorder_{test_topology(), {}};
  std::vector<std::int32_t> ids_{0, 1, 2, 3};
  std::vector<std::int32_t> local_{1, 2, 3, 4};
  TensorView ids() const { return TensorView::contiguous(ids_.data(), DType::kInt32, {2, 2}); }
  TensorView local() const { return TensorView::contiguous(local_.data(), DType::kInt32, {4}); }
};

TEST_F(HooksOutsidePass, RefusedUnlessTheBackendAccepts) {
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(1, ids()),
                       "record_topk outside a pass: call begin_pass first");
  EXPECT_MOESTAT_ERROR(recorder_.record_local_counts(1, local(), 0),
                       "record_local_counts outside a pass");
  EXPECT_EQ(recorder_.topk_calls + recorder_.local_count_calls, 0);
}

TEST_F(HooksOutsidePass, AcceptedHooksReachTheBackendWithEveryOtherCheck) {
  recorder_.accepting = true;
  recorder_.record_topk(1, ids());
  recorder_.record_topk(2, ids(), 1);
  recorder_.record_local_counts(1, local(), 0);
  EXPECT_EQ(recorder_.topk_calls, 2);
  EXPECT_EQ(recorder_.local_count_calls, 1);
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(0, ids()), "layer 0 is a dense layer");
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(ids()), "record_topk with no layer");
  EXPECT_MOESTAT_ERROR(recorder_.record_topk(1, ids(), 3), "num_valid_tokens 3 outside [0, 2]");
  // Pass hooks keep their pairing: the accepted hooks opened no pass.
  EXPECT_MOESTAT_ERROR(recorder_.end_pass(), "end_pass without begin_pass");
}

TEST_F(HooksOutsidePass, TheBackendIsAskedOnlyWithNoPassOpen) {
  recorder_.begin_pass(7);
  recorder_.record_topk(1, ids());
  recorder_.end_pass();
  EXPECT_EQ(recorder_.questions, 0);
  recorder_.accepting = true;
  recorder_.record_topk(1, ids());
  EXPECT_EQ(recorder_.questions, 1);
}

}  // namespace
}  // namespace moestat
