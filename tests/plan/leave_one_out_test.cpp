// Quality on the six real DeepSeek-V3 workloads (../shared/data; skipped where absent).
// In-sample: moestat's plan of one file is at least the reference's on every layer.
// Out-of-sample (leave one out): plan on five, serve the sixth. The baseline is the reference
// planned on the equal-weight sum of the five; moestat, given the five as scenarios, must
// beat it on every held-out file and by a clear margin on average, in every configuration.
#include <gtest/gtest.h>

#include <cstdio>
#include <moestat/plan/eplb.hpp>
#include <moestat/plan/metrics.hpp>

#include "plan/plan_test_support.hpp"

namespace moestat {
namespace {

struct NamedConfig {
  const char* name;
  plan::EplbConfig config;
};

/// The configurations of the golden file: DeepSeek-V3's hierarchical deployment, and global.
std::vector<NamedConfig> golden_configs() {
  return {{"hierarchical 288 slots, 8 groups, 4 nodes, 32 GPUs", {288, 8, 4, 32}},
          {"global 288 slots, 32 GPUs", {288, 1, 1, 32}},
          {"global 288 slots, 72 GPUs", {288, 1, 1, 72}},
          {"global 256 slots (no redundancy), 32 GPUs", {256, 1, 1, 32}}};
}

class RealWorkloads : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(test::deepseek_stats_dir())) {
      GTEST_SKIP() << "no real statistics under " << test::deepseek_stats_dir();
    }
    for (const std::string& name : test::deepseek_stats_files()) {
      files_.push_back(test::read_deepseek_moe_rows(name));
    }
  }
  std::vector<plan::ExpertLoads> files_;
};

TEST_F(RealWorkloads, InSampleMoestatIsNeverWorseThanTheReferenceOnAnyLayer) {
  for (const NamedConfig& named : golden_configs()) {
    std::printf("%s, in-sample balancedness (reference -> moestat):\n", named.name);
    for (std::size_t f = 0; f < files_.size(); ++f) {
      const plan::ExpertLoads& file = files_[f];
      const auto reference = plan::evaluate_placement(file, plan::plan_deepseek(file, named.config),
                                                      named.config.num_gpus);
      const auto ours = plan::evaluate_placement(file, plan::plan_moestat({&file, 1}, named.config),
                                                 named.config.num_gpus);
      for (std::int64_t l = 0; l < file.num_layers; ++l) {
        EXPECT_GE(ours.layer_balancedness[std::size_t(l)],
                  reference.layer_balancedness[std::size_t(l)])
            << named.name << " file " << f << " layer " << l;
      }
      EXPECT_GT(ours.balancedness, reference.balancedness) << named.name << " file " << f;
      std::printf("  %-28s %.4f -> %.4f\n", test::deepseek_stats_files()[f].c_str(),
                  reference.balancedness, ours.balancedness);
    }
  }
}

TEST_F(RealWorkloads, LeaveOneOutMoestatBeatsTheReferenceOnTheSum) {
  for (const NamedConfig& named : golden_configs()) {
    double sum_baseline = 0.0, sum_ours = 0.0;
    std::printf("%s, held-out balancedness:\n  %-28s %10s %10s\n", named.name, "held out",
                "reference", "moestat");
    for (std::size_t held_out = 0; held_out < files_.size(); ++held_out) {
      std::vector<plan::ExpertLoads> train;
      for (std::size_t i = 0; i < files_.size(); ++i) {
        if (i != held_out) train.push_back(files_[i]);
      }
      const Placement baseline = plan::plan_deepseek(plan::equal_weight_sum(train), named.config);
      const Placement ours = plan::plan_moestat(train, named.config);
      const double b =
          plan::evaluate_placement(files_[held_out], baseline, named.config.num_gpus).balancedness;
      const double o =
          plan::evaluate_placement(files_[held_out], ours, named.config.num_gpus).balancedness;
      std::printf("  %-28s %10.4f %10.4f\n", test::deepseek_stats_files()[held_out].c_str(), b, o);
      EXPECT_GT(o, b + 0.005) << named.name << ", held out "
                              << test::deepseek_stats_files()[held_out];
      sum_baseline += b;
      sum_ours += o;
    }
    const auto n = double(files_.size());
    std::printf("  %-28s %10.4f %10.4f\n", "mean", sum_baseline / n, sum_ours / n);
    EXPECT_GT(sum_ours / n, sum_baseline / n + 0.03) << named.name;
  }
}

}  // namespace
}  // namespace moestat
