// The synthetic workload behind `moestat demo`: deterministic per seed and independent of
// generation order, batch shapes as documented, ids that agree with the placement, garbage
// in padding rows, and skew in the documented range.
#include <gtest/gtest.h>

#include <algorithm>
#include <moestat/workload.hpp>
#include <numeric>
#include <set>

#include "io/test_support.hpp"

namespace moestat {
namespace {

using workload::SyntheticOptions;
using workload::SyntheticWorkload;

// ---- Naive reference ----

/// Every id of one (pass, layer), generated into fresh buffers.
struct LayerIds {
  std::vector<std::int32_t> physical, logical;
};
LayerIds generate(const SyntheticWorkload& work, std::int64_t pass, std::int64_t layer) {
  const auto rows = work.batch(pass).num_rows;
  LayerIds ids;
  ids.physical.assign(std::size_t(rows * work.topology().top_k), 12345);
  ids.logical.assign(ids.physical.size(), 12345);
  work.fill_topk(pass, layer, ids.physical, ids.logical);
  return ids;
}

SyntheticOptions small_options(std::uint64_t seed) {
  return {.seed = seed, .num_passes = 12, .max_prefill_tokens = 700};
}

TEST(SyntheticWorkload, DeepSeekLikeTopology) {
  const ModelTopology topology = workload::deepseek_like_topology();
  EXPECT_EQ(topology.num_layers, 61);
  EXPECT_EQ(topology.num_moe_layers(), 58);
  EXPECT_FALSE(topology.is_moe(2));
  EXPECT_TRUE(topology.is_moe(3));
  EXPECT_EQ(topology.num_logical_experts, 256);
  EXPECT_EQ(topology.num_physical_experts, 288);
  EXPECT_EQ(topology.top_k, 8);
}

TEST(SyntheticWorkload, SameSeedSameIdsInAnyOrder) {
  const SyntheticWorkload a(workload::preset("deepseek-v3"), small_options(7));
  const SyntheticWorkload b(workload::preset("deepseek-v3"), small_options(7));
  EXPECT_TRUE(a.placement().same_maps(b.placement()));
  // b generates in reverse order and twice; every result must equal a's.
  for (std::int64_t pass = 11; pass >= 0; --pass) {
    for (std::int64_t layer : {60, 3, 30}) {
      const LayerIds first = generate(b, pass, layer);
      const LayerIds again = generate(b, pass, layer);
      const LayerIds reference = generate(a, pass, layer);
      EXPECT_EQ(first.physical, reference.physical);
      EXPECT_EQ(first.logical, reference.logical);
      EXPECT_EQ(again.physical, reference.physical);
    }
  }
}

TEST(SyntheticWorkload, DifferentSeedsDiffer) {
  const SyntheticWorkload a(workload::preset("deepseek-v3"), small_options(1));
  const SyntheticWorkload b(workload::preset("deepseek-v3"), small_options(2));
  EXPECT_FALSE(a.placement().same_maps(b.placement()));
  EXPECT_NE(generate(a, 0, 3).physical, generate(b, 0, 3).physical);
}

TEST(SyntheticWorkload, BatchShapes) {
  const SyntheticWorkload work(workload::preset("deepseek-v3"), {.num_passes = 400});
  const std::set<std::int64_t> graph_sizes{1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64};
  int decode = 0, prefill = 0, padded = 0;
  for (std::int64_t pass = 0; pass < 400; ++pass) {
    const workload::PassBatch batch = work.batch(pass);
    EXPECT_EQ(batch.pass_id, pass);
    EXPECT_LE(batch.num_valid_tokens, batch.num_rows);
    padded += batch.num_rows > batch.num_valid_tokens ? 1 : 0;
    if (batch.prefill) {
      ++prefill;
      EXPECT_GE(batch.num_valid_tokens, 512);
      EXPECT_LE(batch.num_valid_tokens, 4096);
      EXPECT_EQ(batch.num_rows % 64, 0);
      EXPECT_LT(batch.num_rows - batch.num_valid_tokens, 64);
    } else {
      ++decode;
      EXPECT_GE(batch.num_valid_tokens, 1);
      EXPECT_LE(batch.num_valid_tokens, 64);
      EXPECT_TRUE(graph_sizes.contains(batch.num_rows)) << batch.num_rows;
    }
  }
  // prefill_fraction 0.25 of 400 passes; a fixed seed, so this is not a timing or luck test.
  EXPECT_GT(prefill, 60);
  EXPECT_GT(decode, 240);
  EXPECT_GT(padded, 100);
  EXPECT_THROW(work.batch(400), Error);
}

TEST(SyntheticWorkload, IdsAgreeWithThePlacementAndPaddingIsGarbage) {
  const SyntheticWorkload work(workload::preset("deepseek-v3"), small_options(3));
  const ModelTopology& topology = work.topology();
  const std::int64_t k = topology.top_k;
  std::int64_t garbage_in_range = 0, minus_ones = 0, out_of_range = 0;
  for (std::int64_t pass = 0; pass < 12; ++pass) {
    const workload::PassBatch batch = work.batch(pass);
    for (std::int64_t layer = 3; layer < topology.num_layers; ++layer) {
      const LayerIds ids = generate(work, pass, layer);
      for (std::int64_t token = 0; token < batch.num_rows; ++token) {
        std::set<std::int32_t> experts;
        for (std::int64_t c = 0; c < k; ++c) {
          const auto i = std::size_t(token * k + c);
          const std::int32_t physical = ids.physical[i];
          const std::int32_t logical = ids.logical[i];
          EXPECT_GE(physical, -1);
          EXPECT_LT(physical, topology.num_physical_experts + 32);
          if (token >= batch.num_valid_tokens) {
            EXPECT_EQ(logical, -1);
            garbage_in_range += physical >= 0 && physical < topology.num_physical_experts;
            continue;
          }
          if (physical == -1 || physical >= topology.num_physical_experts) {
            EXPECT_EQ(logical, -1);
            (physical == -1 ? minus_ones : out_of_range) += 1;
            continue;
          }
          EXPECT_EQ(work.placement().logical_of(layer, physical), logical);
          EXPECT_TRUE(experts.insert(logical).second) << "expert repeated within a token";
        }
      }
    }
  }
  EXPECT_GT(garbage_in_range, 0);  // padding rows hold ids a buggy recorder would count
  EXPECT_GT(minus_ones + out_of_range, 0);
}

TEST(SyntheticWorkload, SkewedWithDifferentHotExpertsPerLayer) {
  // One prefill pass of 4096 tokens.
  const SyntheticWorkload work(
      workload::preset("deepseek-v3"),
      {.num_passes = 1, .prefill_fraction = 1.0, .min_prefill_tokens = 4096});
  const ModelTopology& topology = work.topology();
  const std::int64_t num_experts = topology.num_logical_experts;
  std::set<std::int64_t> hottest;
  for (std::int64_t layer = 0; layer < topology.num_layers; ++layer) {
    const auto row =
        work.popularity().subspan(std::size_t(layer * num_experts), std::size_t(num_experts));
    const double total = std::accumulate(row.begin(), row.end(), 0.0);
    if (!topology.is_moe(layer)) {
      EXPECT_EQ(total, 0.0);
      continue;
    }
    EXPECT_NEAR(total, 1.0, 1e-9);
    hottest.insert(std::max_element(row.begin(), row.end()) - row.begin());
  }
  EXPECT_GT(hottest.size(), 20u);

  // Realised load of one large batch: max/mean of every MoE layer within 2x-20x.
  const workload::PassBatch batch = work.batch(0);
  for (std::int64_t layer = 3; layer < topology.num_layers; layer += 11) {
    std::vector<std::int64_t> load(static_cast<std::size_t>(num_experts), 0);
    std::int64_t routed = 0;
    const LayerIds ids = generate(work, 0, layer);
    for (std::int64_t i = 0; i < batch.num_valid_tokens * topology.top_k; ++i) {
      if (ids.logical[std::size_t(i)] >= 0) {
        ++load[std::size_t(ids.logical[std::size_t(i)])];
        ++routed;
      }
    }
    const double mean = double(routed) / double(num_experts);
    const double max = double(*std::max_element(load.begin(), load.end()));
    EXPECT_GT(max / mean, 2.0) << "layer " << layer;
    EXPECT_LT(max / mean, 20.0) << "layer " << layer;
  }
}

TEST(SyntheticWorkload, PlacementReplicatesHotExperts) {
  const SyntheticWorkload work(workload::preset("deepseek-v3"), small_options(5));
  const Placement& placement = work.placement();
  EXPECT_EQ(placement.version(), 1u);
  const Placement trivial = Placement::trivial(61, 288, 256);
  for (std::int64_t layer = 3; layer < 61; ++layer) {
    const auto row = placement.physical_to_logical().subspan(std::size_t(layer * 288), 288);
    const auto trivial_row = trivial.physical_to_logical().subspan(std::size_t(layer * 288), 288);
    EXPECT_FALSE(std::equal(row.begin(), row.end(), trivial_row.begin())) << layer;
    // The most popular expert has the most replicas.
    const auto popularity = work.popularity().subspan(std::size_t(layer * 256), 256);
    const auto hottest =
        std::max_element(popularity.begin(), popularity.end()) - popularity.begin();
    const auto replicas = placement.replica_counts().subspan(std::size_t(layer * 256), 256);
    EXPECT_EQ(replicas[std::size_t(hottest)], *std::max_element(replicas.begin(), replicas.end()));
  }
}

TEST(SyntheticWorkload, RejectsBadOptionsAndBuffers) {
  const workload::Preset& deepseek = workload::preset("deepseek-v3");
  test::expect_error([&] { SyntheticWorkload(deepseek, {.num_passes = 0}); }, {"num_passes"});
  test::expect_error([&] { SyntheticWorkload(deepseek, {.prefill_fraction = 1.5}); },
                     {"prefill_fraction"});
  test::expect_error([&] { SyntheticWorkload(deepseek, {.max_decode_tokens = 65}); },
                     {"decode tokens"});
  test::expect_error([&] { SyntheticWorkload(deepseek, {.minus_one_rate = -1.0}); },
                     {"minus_one_rate"});
  const SyntheticWorkload work(deepseek, small_options(1));
  std::vector<std::int32_t> wrong(3);
  test::expect_error([&] { work.fill_topk(0, 3, wrong); }, {"physical_ids holds 3"});
  test::expect_error([&] { work.fill_topk(0, 0, wrong); }, {"layer 0 is not a MoE layer"});
}

TEST(SyntheticWorkload, PresetsHaveTheirModelsShapes) {
  const auto& deepseek = workload::preset("deepseek-v3").topology;
  EXPECT_EQ(deepseek, workload::deepseek_like_topology());
  EXPECT_EQ(workload::preset("deepseek-v3").popularity.group_limit, 4);
  const auto& mixtral = workload::preset("mixtral-8x7b").topology;
  EXPECT_EQ(mixtral.num_layers, 32);
  EXPECT_EQ(mixtral.num_moe_layers(), 32);
  EXPECT_EQ(mixtral.num_logical_experts, 8);
  EXPECT_EQ(mixtral.top_k, 2);
  const auto& qwen = workload::preset("qwen3-moe").topology;
  EXPECT_EQ(qwen.num_layers, 48);
  EXPECT_EQ(qwen.num_logical_experts, 128);
  EXPECT_EQ(qwen.top_k, 8);
  EXPECT_EQ(workload::presets().size(), 3u);
  test::expect_error([] { workload::preset("gpt-5"); },
                     {"unknown workload preset 'gpt-5'", "deepseek-v3, mixtral-8x7b, qwen3-moe"});
}

TEST(SyntheticWorkload, EveryPresetIsDeterministicPerSeed) {
  for (const workload::Preset& preset : workload::presets()) {
    const SyntheticOptions options = {.seed = 9, .num_passes = 6, .drift_passes = 2};
    const SyntheticWorkload a(preset, options);
    const SyntheticWorkload b(preset, options);
    SyntheticOptions other_seed = options;
    other_seed.seed = 10;
    const SyntheticWorkload c(preset, other_seed);
    EXPECT_TRUE(a.placement().same_maps(b.placement())) << preset.name;
    const std::int64_t last = preset.topology.num_layers - 1;
    for (std::int64_t pass = 5; pass >= 0; --pass) {
      EXPECT_EQ(generate(a, pass, last).physical, generate(b, pass, last).physical) << preset.name;
    }
    EXPECT_NE(generate(a, 0, last).logical, generate(c, 0, last).logical) << preset.name;
    std::vector<double> pa(static_cast<std::size_t>(preset.topology.num_logical_experts));
    std::vector<double> pb(pa.size());
    a.popularity(3, last, workload::Phase::kDecode, pa);
    b.popularity(3, last, workload::Phase::kDecode, pb);
    EXPECT_EQ(pa, pb) << preset.name;
  }
}

TEST(SyntheticWorkload, DeepSeekTokensUseAtMostFourGroups) {
  const SyntheticWorkload work(workload::preset("deepseek-v3"), small_options(4));
  std::int64_t tokens_using_four = 0;
  for (std::int64_t pass = 0; pass < 4; ++pass) {
    const workload::PassBatch batch = work.batch(pass);
    const LayerIds ids = generate(work, pass, 40);
    for (std::int64_t token = 0; token < batch.num_valid_tokens; ++token) {
      std::set<std::int32_t> groups;
      for (std::int64_t c = 0; c < 8; ++c) {
        const std::int32_t expert = ids.logical[std::size_t(token * 8 + c)];
        if (expert >= 0) groups.insert(expert / 32);
      }
      EXPECT_LE(groups.size(), 4u);
      tokens_using_four += groups.size() == 4 ? 1 : 0;
    }
  }
  EXPECT_GT(tokens_using_four, 0);
}

TEST(SyntheticWorkload, PopularityDriftsAndDiffersByPhase) {
  const SyntheticWorkload work(workload::preset("deepseek-v3"),
                               {.num_passes = 41, .drift_passes = 20});
  const auto row = [&](std::int64_t pass, workload::Phase phase) {
    std::vector<double> out(256);
    work.popularity(pass, 10, phase, out);
    EXPECT_NEAR(std::accumulate(out.begin(), out.end(), 0.0), 1.0, 1e-9);
    return out;
  };
  using workload::Phase;
  EXPECT_NE(row(0, Phase::kPrefill), row(0, Phase::kDecode));
  EXPECT_NE(row(0, Phase::kPrefill), row(1, Phase::kPrefill));
  EXPECT_NE(row(20, Phase::kDecode), row(40, Phase::kDecode));
  test::expect_error([&] { row(41, Phase::kDecode); }, {"pass 41 out of range"});
}

TEST(SyntheticWorkload, RejectsBadPopularityModels) {
  const ModelTopology topology = workload::deepseek_like_topology();
  const auto with = [&](workload::PopularityModel model) {
    SyntheticWorkload(topology, std::move(model), {});
  };
  test::expect_error([&] { with({.sigma_knots = {}}); }, {"sigma_knots"});
  test::expect_error([&] { with({.sigma_knots = {-1.0}}); }, {"sigma_knots"});
  test::expect_error([&] { with({.group_share = 1.5}); }, {"group_share"});
  test::expect_error([&] { with({.group_limit = 9}); }, {"group_limit 9"});
  test::expect_error([&] { with({.num_hot = 257}); }, {"num_hot"});
  test::expect_error([&] { with({.phase_correlation = -0.1}); }, {"phase_correlation"});
  test::expect_error([&] { with({.drift_correlation = 2.0}); }, {"drift_correlation"});
  test::expect_error([&] { SyntheticWorkload(topology, {}, {.drift_passes = 0}); },
                     {"drift_passes"});
}

}  // namespace
}  // namespace moestat
