// plan_deepseek against the reference eplb.py's own outputs (../shared/golden): the exact
// physical_to_logical and replica counts of every layer, those whose input has equal values
// included (their order follows the documented tie-break).
#include <gtest/gtest.h>

#include <moestat/plan/eplb.hpp>
#include <moestat/plan/metrics.hpp>

#include "plan/plan_test_support.hpp"
#include "unit/expect_error.hpp"

namespace moestat {
namespace {

using Json = nlohmann::json;

std::filesystem::path golden_path() {
  return test::shared_dir() / "golden" / "eplb_reference.json";
}

plan::ExpertLoads case_loads(const Json& c) {
  if (c.contains("weight")) {
    plan::ExpertLoads loads;
    loads.num_layers = std::int64_t(c["weight"].size());
    loads.num_experts = std::int64_t(c["weight"][0].size());
    for (const Json& row : c["weight"]) {
      for (const Json& v : row) loads.values.push_back(v.get<double>());
    }
    return loads;
  }
  return test::select_rows(test::read_deepseek_stats(c["name"].get<std::string>()),
                           c["moe_rows"].get<std::vector<std::int64_t>>());
}

TEST(EplbGolden, DeepseekMatchesTheReferenceOnEveryLayerWithoutTies) {
  if (!std::filesystem::exists(golden_path()) ||
      !std::filesystem::exists(test::deepseek_stats_dir())) {
    GTEST_SKIP() << "no golden outputs under " << golden_path();
  }
  const Json golden = Json::parse(test::slurp(golden_path()));
  std::int64_t compared = 0, tie_layers = 0, tie_layers_equal = 0;
  for (const Json& c : golden["cases"]) {
    const plan::ExpertLoads loads = case_loads(c);
    for (const auto& [name, result] : c["results"].items()) {
      SCOPED_TRACE(c["name"].get<std::string>() + " / " + name);
      const Json& cfg = result["config"];
      const plan::EplbConfig config{.num_replicas = cfg["num_replicas"].get<std::int64_t>(),
                                    .num_groups = cfg["num_groups"].get<std::int64_t>(),
                                    .num_nodes = cfg["num_nodes"].get<std::int64_t>(),
                                    .num_gpus = cfg["num_gpus"].get<std::int64_t>()};
      const Placement ours = plan::plan_deepseek(loads, config);
      const auto phy2log = result["phy2log"].get<std::vector<std::vector<std::int32_t>>>();
      const auto logcnt = result["logcnt"].get<std::vector<std::vector<std::int32_t>>>();
      const auto ties = result["layer_has_ties"].get<std::vector<bool>>();
      ASSERT_EQ(std::int64_t(phy2log.size()), loads.num_layers);
      std::vector<std::int32_t> reference_map;
      for (std::int64_t layer = 0; layer < loads.num_layers; ++layer) {
        const auto row = ours.physical_to_logical().subspan(
            std::size_t(layer * config.num_replicas), std::size_t(config.num_replicas));
        const auto counts = ours.replica_counts().subspan(std::size_t(layer * loads.num_experts),
                                                          std::size_t(loads.num_experts));
        const auto& want = phy2log[std::size_t(layer)];
        reference_map.insert(reference_map.end(), want.begin(), want.end());
        const bool equal = std::equal(row.begin(), row.end(), want.begin(), want.end()) &&
                           std::ranges::equal(counts, logcnt[std::size_t(layer)]);
        if (ties[std::size_t(layer)]) {
          ++tie_layers;
          tie_layers_equal += equal ? 1 : 0;
          continue;
        }
        ++compared;
        EXPECT_TRUE(equal) << "layer " << layer;
      }
      // The metrics agree with the reference's own balancedness of its plan.
      const Placement reference(loads.num_layers, config.num_replicas, loads.num_experts,
                                reference_map);
      const plan::BalanceReport report =
          plan::evaluate_placement(loads, reference, config.num_gpus);
      EXPECT_NEAR(report.balancedness, result["balancedness_mean_over_layers"].get<double>(), 1e-9);
      EXPECT_NEAR(report.balancedness_sum_ratio, result["balancedness_sum_ratio"].get<double>(),
                  1e-9);
    }
  }
  EXPECT_GT(compared, 1000);
  EXPECT_GT(tie_layers, 100);
  EXPECT_EQ(tie_layers_equal, tie_layers);
  std::printf("compared %lld layers exactly; %lld of %lld layers with ties equal too\n",
              static_cast<long long>(compared), static_cast<long long>(tie_layers_equal),
              static_cast<long long>(tie_layers));
}

TEST(EplbConfig, RefusesMoreReplicasThanTheBound) {
  // The planners' time grows faster than linearly with P (issue 14: 20,000,000 ran past
  // 120 s), so P is bounded before anything is planned.
  plan::EplbConfig config{plan::kMaxReplicas, 1, 1, 4};
  config.validate(8);
  config.num_replicas += 4;
  EXPECT_MOESTAT_ERROR(config.validate(8), "4100 replicas per layer is more than moestat plans");
}

}  // namespace
}  // namespace moestat
