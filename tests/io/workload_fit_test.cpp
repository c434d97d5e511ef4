// The built-in presets against the real traffic they were fitted to (../shared/data; the
// tests skip where it is absent): per-layer Gini and max/mean load, expert-group spread,
// prefill-vs-decode and drift correlations stay within the tolerances docs/workload.md
// states. The generator's figures come from its own token draws (shape figures) or from
// its popularity law (correlations, which the real data measures on millions of tokens).
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <moestat/workload.hpp>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

namespace moestat {
namespace {

using Loads = std::vector<double>;  // one layer's per-expert load
using Layers = std::vector<Loads>;  // MoE layers of one file or one run

// ---- Naive references: the statistics, as scripts/fit_workload.py computes them ----

double mean(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0) / double(values.size());
}

double gini(Loads loads) {
  std::sort(loads.begin(), loads.end());
  const double n = double(loads.size());
  double weighted = 0.0;
  for (std::size_t i = 0; i < loads.size(); ++i)
    weighted += (2.0 * double(i + 1) - n - 1) * loads[i];
  return weighted / (n * std::accumulate(loads.begin(), loads.end(), 0.0));
}

double max_over_mean(const Loads& loads) {
  return *std::max_element(loads.begin(), loads.end()) / mean(loads);
}

double pearson(const Loads& a, const Loads& b) {
  const double ma = mean(a), mb = mean(b);
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += (a[i] - ma) * (b[i] - mb);
    aa += (a[i] - ma) * (a[i] - ma);
    bb += (b[i] - mb) * (b[i] - mb);
  }
  return ab / std::sqrt(aa * bb);
}

/// Coefficient of variation of the expert groups' summed loads.
double group_cv(const Loads& loads, std::size_t num_groups) {
  Loads sums(num_groups, 0.0);
  const std::size_t size = loads.size() / num_groups;
  for (std::size_t e = 0; e < loads.size(); ++e) sums[e / size] += loads[e];
  const double m = mean(sums);
  double var = 0;
  for (double s : sums) var += (s - m) * (s - m);
  return std::sqrt(var / double(num_groups)) / m;
}

/// Mean over files, then layers, of `statistic`.
template <typename Statistic>
double mean_over(const std::vector<Layers>& files, Statistic statistic) {
  std::vector<double> values;
  for (const Layers& file : files) {
    for (const Loads& layer : file) values.push_back(statistic(layer));
  }
  return mean(values);
}

/// Mean over layers of the correlation of two files' loads.
double layer_correlation(const Layers& a, const Layers& b) {
  std::vector<double> values;
  for (std::size_t l = 0; l < a.size(); ++l) values.push_back(pearson(a[l], b[l]));
  return mean(values);
}

/// Mean over the pairs (a in `first`, b in `second`, a before b when the lists are one).
double pair_correlation(const std::vector<Layers>& first, const std::vector<Layers>& second,
                        bool same_list) {
  std::vector<double> values;
  for (std::size_t i = 0; i < first.size(); ++i) {
    for (std::size_t j = same_list ? i + 1 : 0; j < second.size(); ++j) {
      values.push_back(layer_correlation(first[i], second[j]));
    }
  }
  return mean(values);
}

// ---- Real data ----

const std::filesystem::path kData = std::filesystem::path(MOESTAT_SHARED_DIR) / "data";

/// Reads `key` ([layers][experts] numbers) of every JSON file in `dir` whose name contains
/// `filter`, keeping rows from `first_layer` on.
std::vector<Layers> read_files(const std::filesystem::path& dir, const std::string& key,
                               const std::string& filter, std::size_t first_layer) {
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".json") && name.find(filter) != std::string::npos) {
      paths.push_back(entry.path());
    }
  }
  std::sort(paths.begin(), paths.end());
  std::vector<Layers> files;
  for (const auto& path : paths) {
    std::ifstream in(path);
    const nlohmann::json document = nlohmann::json::parse(in);
    Layers layers;
    for (std::size_t l = first_layer; l < document.at(key).size(); ++l) {
      layers.push_back(document.at(key)[l].get<Loads>());
    }
    files.push_back(std::move(layers));
  }
  return files;
}

// ---- The generator's figures ----

/// Per-expert loads of each MoE layer over passes [first, first + count), counted from the
/// generator's logical draws.
Layers realised(const workload::SyntheticWorkload& work, std::int64_t first, std::int64_t count) {
  const ModelTopology& topology = work.topology();
  Layers layers;
  std::vector<std::int32_t> physical, logical;
  for (std::int64_t layer = 0; layer < topology.num_layers; ++layer) {
    if (!topology.is_moe(layer)) continue;
    Loads loads(static_cast<std::size_t>(topology.num_logical_experts), 0.0);
    for (std::int64_t pass = first; pass < first + count; ++pass) {
      const workload::PassBatch batch = work.batch(pass);
      physical.resize(std::size_t(batch.num_rows * topology.top_k));
      logical.resize(physical.size());
      work.fill_topk(pass, layer, physical, logical);
      for (std::int32_t id : logical) {
        if (id >= 0) loads[std::size_t(id)] += 1.0;
      }
    }
    layers.push_back(std::move(loads));
  }
  return layers;
}

/// The law's expected loads (popularity) of every MoE layer at `pass` in `phase`.
Layers expected(const workload::SyntheticWorkload& work, std::int64_t pass, workload::Phase phase) {
  const ModelTopology& topology = work.topology();
  Layers layers;
  for (std::int64_t layer = 0; layer < topology.num_layers; ++layer) {
    if (!topology.is_moe(layer)) continue;
    Loads loads(static_cast<std::size_t>(topology.num_logical_experts));
    work.popularity(pass, layer, phase, loads);
    layers.push_back(std::move(loads));
  }
  return layers;
}

/// Passes of `tokens` prefill tokens each (prefill_fraction 1), or of 64-token decode
/// batches; drift so slow that a run of these passes sees none of it.
workload::SyntheticOptions still_options(bool prefill, std::int64_t num_passes,
                                         std::int64_t tokens = 4096) {
  return {.seed = 11,
          .num_passes = num_passes,
          .prefill_fraction = prefill ? 1.0 : 0.0,
          .min_decode_tokens = 64,
          .max_decode_tokens = 64,
          .min_prefill_tokens = tokens,
          .max_prefill_tokens = tokens,
          .drift_passes = 1 << 30};
}

// Tolerances (docs/workload.md): absolute for Gini and correlations, relative for ratios.
constexpr double kGiniTolerance = 0.03;
constexpr double kMaxMeanTolerance = 0.15;
constexpr double kGroupCvTolerance = 0.20;
constexpr double kCorrelationTolerance = 0.05;

TEST(WorkloadFit, DeepSeekV3ShapeMatchesSglangCounts) {
  const auto dir = kData / "deepseek-v3-sglang-stats";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent";
  const std::vector<Layers> real = read_files(dir, "logical_count", "", 3);
  ASSERT_EQ(real.size(), 6u);

  // 32768 tokens per phase: counting noise well below the tolerances.
  const workload::Preset& preset = workload::preset("deepseek-v3");
  const workload::SyntheticWorkload prefill(preset, still_options(true, 8));
  const workload::SyntheticWorkload decode(preset, still_options(false, 512));
  const std::vector<Layers> model = {realised(prefill, 0, 8), realised(decode, 0, 512)};

  const double real_gini = mean_over(real, gini), model_gini = mean_over(model, gini);
  const double real_max = mean_over(real, max_over_mean);
  const double model_max = mean_over(model, max_over_mean);
  const auto groups = [](const Loads& loads) { return group_cv(loads, 8); };
  const double real_groups = mean_over(real, groups), model_groups = mean_over(model, groups);
  fmt::print(
      "deepseek-v3 real / model: gini {:.3f} / {:.3f}, max/mean {:.2f} / {:.2f}, "
      "group cv {:.3f} / {:.3f}\n",
      real_gini, model_gini, real_max, model_max, real_groups, model_groups);
  EXPECT_NEAR(model_gini, real_gini, kGiniTolerance);
  EXPECT_NEAR(model_max / real_max, 1.0, kMaxMeanTolerance) << model_max << " vs " << real_max;
  EXPECT_NEAR(model_groups / real_groups, 1.0, kGroupCvTolerance)
      << model_groups << " vs " << real_groups;
  // Every layer is skewed as real layers are: none uniform, none a single expert.
  for (const Layers& run : model) {
    for (const Loads& layer : run) {
      EXPECT_GT(max_over_mean(layer), 2.0);
      EXPECT_LT(max_over_mean(layer), 30.0);
    }
  }
}

TEST(WorkloadFit, DeepSeekV3PhaseAndDriftMatchSglangCounts) {
  const auto dir = kData / "deepseek-v3-sglang-stats";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent";
  const std::vector<Layers> prefill_files = read_files(dir, "logical_count", "prefill", 3);
  const std::vector<Layers> decode_files = read_files(dir, "logical_count", "decode", 3);
  ASSERT_EQ(prefill_files.size(), 4u);
  ASSERT_EQ(decode_files.size(), 2u);
  const double real_phase = pair_correlation(prefill_files, decode_files, false);
  // Two benchmark workloads of one phase stand for two moments of a run one drift period
  // apart (the data has no time axis).
  const double real_drift = 0.5 * (pair_correlation(prefill_files, prefill_files, true) +
                                   pair_correlation(decode_files, decode_files, true));

  const std::int64_t period = 100;
  workload::SyntheticOptions options = still_options(true, period + 1);
  options.drift_passes = period;
  const workload::SyntheticWorkload work(workload::preset("deepseek-v3"), options);
  using workload::Phase;
  const double model_phase =
      layer_correlation(expected(work, 0, Phase::kPrefill), expected(work, 0, Phase::kDecode));
  const double model_drift = 0.5 * (layer_correlation(expected(work, 0, Phase::kPrefill),
                                                      expected(work, period, Phase::kPrefill)) +
                                    layer_correlation(expected(work, 0, Phase::kDecode),
                                                      expected(work, period, Phase::kDecode)));
  fmt::print("deepseek-v3 real / model: phase correlation {:.3f} / {:.3f}, drift {:.3f} / {:.3f}\n",
             real_phase, model_phase, real_drift, model_drift);
  EXPECT_NEAR(model_phase, real_phase, kCorrelationTolerance);
  EXPECT_NEAR(model_drift, real_drift, kCorrelationTolerance);
  // Halfway through a period the law has moved part of the way.
  const double halfway = layer_correlation(expected(work, 0, Phase::kPrefill),
                                           expected(work, period / 2, Phase::kPrefill));
  EXPECT_GT(halfway, model_drift);
  EXPECT_LT(halfway, 1.0);
}

TEST(WorkloadFit, Mixtral8x7bMatchesFiddlerCounts) {
  const auto dir = kData / "mixtral-8x7b-fiddler";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent";
  const std::vector<Layers> real = read_files(dir, "expert_popularity", "", 0);
  ASSERT_EQ(real.size(), 7u);

  // Each file is measured as the real one was: with its own number of tokens, so both
  // sides carry the same counting noise. Files take disjoint passes; "later" is one drift
  // period on.
  const std::int64_t period = 100000;
  const std::int64_t passes_per_file = 16;
  workload::SyntheticOptions options =
      still_options(true, period + passes_per_file * std::int64_t(real.size()), 0);
  options.drift_passes = period;
  options.max_prefill_tokens = 4096;
  std::vector<Layers> now, later;
  for (std::size_t f = 0; f < real.size(); ++f) {
    // fiddler's rows sum to more than 2 x its total_input_tokens; tokens = row sum / top_k.
    const double tokens = std::accumulate(real[f][0].begin(), real[f][0].end(), 0.0) / 2.0;
    const auto passes = std::int64_t(std::ceil(tokens / 4096.0));
    options.min_prefill_tokens = std::int64_t(tokens) / passes;
    options.max_prefill_tokens = options.min_prefill_tokens;
    const workload::SyntheticWorkload work(workload::preset("mixtral-8x7b"), options);
    ASSERT_LE(passes, passes_per_file);
    const auto first = std::int64_t(f) * passes_per_file;
    now.push_back(realised(work, first, passes));
    later.push_back(realised(work, period + first, passes));
  }
  std::vector<double> drift;
  for (std::size_t i = 0; i < now.size(); ++i) {
    for (std::size_t j = i + 1; j < now.size(); ++j) {
      drift.push_back(layer_correlation(now[i], later[j]));
    }
  }
  fmt::print(
      "mixtral-8x7b real / model: gini {:.3f} / {:.3f}, max/mean {:.3f} / {:.3f}, "
      "drift {:.3f} / {:.3f}\n",
      mean_over(real, gini), mean_over(now, gini), mean_over(real, max_over_mean),
      mean_over(now, max_over_mean), pair_correlation(real, real, true), mean(drift));
  EXPECT_NEAR(mean_over(now, gini), mean_over(real, gini), kGiniTolerance);
  EXPECT_NEAR(mean_over(now, max_over_mean) / mean_over(real, max_over_mean), 1.0,
              kMaxMeanTolerance);
  EXPECT_NEAR(mean(drift), pair_correlation(real, real, true), 2 * kCorrelationTolerance);
}

TEST(WorkloadFit, Qwen3FollowsTheDeepSeekLawWithoutGroups) {
  // No public Qwen3 counts: its law is DeepSeek-V3's without groups (docs/workload.md), so
  // its skew must be DeepSeek's within the same tolerance.
  const auto dir = kData / "deepseek-v3-sglang-stats";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent";
  const std::vector<Layers> real = read_files(dir, "logical_count", "", 3);
  const workload::SyntheticWorkload work(workload::preset("qwen3-moe"), still_options(true, 8));
  const std::vector<Layers> model = {realised(work, 0, 8)};
  ASSERT_EQ(model[0].size(), 48u);
  fmt::print("qwen3-moe model gini {:.3f}, deepseek-v3 real {:.3f}\n", mean_over(model, gini),
             mean_over(real, gini));
  EXPECT_NEAR(mean_over(model, gini), mean_over(real, gini), 2 * kGiniTolerance);
}

}  // namespace
}  // namespace moestat
