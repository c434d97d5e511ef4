#include "popularity_law.hpp"

#include <algorithm>
#include <cmath>
#include <moestat/error.hpp>

#include "random.hpp"

namespace moestat::workload {

void PopularityModel::validate(const ModelTopology& topology) const {
  MOESTAT_CHECK(!sigma_knots.empty(), "popularity: sigma_knots must hold at least one knot");
  for (double knot : sigma_knots) {
    MOESTAT_CHECK(std::isfinite(knot) && knot >= 0.0 && knot <= 10.0,
                  "popularity: sigma_knots must be in [0, 10], got {}", knot);
  }
  MOESTAT_CHECK(std::isfinite(sigma_jitter) && sigma_jitter >= 0.0 && sigma_jitter <= 2.0,
                "popularity: sigma_jitter must be in [0, 2], got {}", sigma_jitter);
  MOESTAT_CHECK(group_share >= 0.0 && group_share <= 1.0,
                "popularity: group_share must be in [0, 1], got {}", group_share);
  const std::int64_t experts_per_group = topology.num_logical_experts / topology.num_groups;
  MOESTAT_CHECK(group_limit >= 0 && group_limit <= topology.num_groups &&
                    (group_limit == 0 || group_limit * experts_per_group >= topology.top_k),
                "popularity: group_limit {} must be 0 (no limit) or at most the {} groups, "
                "holding at least top_k = {} experts",
                group_limit, topology.num_groups, topology.top_k);
  MOESTAT_CHECK(num_hot >= 0 && num_hot <= topology.num_logical_experts,
                "popularity: num_hot must be in [0, {}], got {}", topology.num_logical_experts,
                num_hot);
  MOESTAT_CHECK(std::isfinite(hot_boost) && std::abs(hot_boost) <= 20.0,
                "popularity: hot_boost must be in [-20, 20], got {}", hot_boost);
  MOESTAT_CHECK(phase_correlation >= 0.0 && phase_correlation <= 1.0,
                "popularity: phase_correlation must be in [0, 1], got {}", phase_correlation);
  MOESTAT_CHECK(drift_correlation >= 0.0 && drift_correlation <= 1.0,
                "popularity: drift_correlation must be in [0, 1], got {}", drift_correlation);
}

namespace detail {
namespace {

double interpolate(const std::vector<double>& knots, double fraction) {
  if (knots.size() == 1) return knots[0];
  const double x = fraction * double(knots.size() - 1);
  const std::size_t i = std::min(static_cast<std::size_t>(x), knots.size() - 2);
  return knots[i] + (knots[i + 1] - knots[i]) * (x - double(i));
}

}  // namespace

LayerLaw draw_layer_law(const ModelTopology& topology, const PopularityModel& model,
                        std::uint64_t seed, std::int64_t layer, std::int64_t moe_index,
                        std::int64_t num_moe_layers, std::int64_t num_passes,
                        std::int64_t drift_passes) {
  const std::int64_t num_experts = topology.num_logical_experts;
  const auto width = static_cast<std::size_t>(num_experts + topology.num_groups);
  Rng rng = stream(seed, kPopularity, std::uint64_t(layer));
  LayerLaw law;
  const double depth = num_moe_layers > 1 ? double(moe_index) / double(num_moe_layers - 1) : 0.0;
  law.sigma =
      interpolate(model.sigma_knots, depth) * std::exp(model.sigma_jitter * standard_normal(rng));
  // The hot experts: the first num_hot of a random order.
  std::vector<std::int32_t> order(static_cast<std::size_t>(num_experts));
  for (std::size_t e = 0; e < order.size(); ++e) order[e] = std::int32_t(e);
  shuffle(std::span(order), rng);
  law.hot.assign(order.size(), 0);
  for (std::int64_t i = 0; i < model.num_hot; ++i) law.hot[std::size_t(order[std::size_t(i)])] = 1;

  // Chains of anchors: the shared part and each phase's part step by
  // x' = rho * x + sqrt(1 - rho^2) * noise, so neighbours correlate rho and each stays
  // standard normal; z mixes the shared part and the phase's part.
  law.num_anchors = (num_passes - 1) / drift_passes + 2;
  const double rho = model.drift_correlation;
  const double step_noise = std::sqrt(1.0 - rho * rho);
  const double shared_weight = std::sqrt(model.phase_correlation);
  const double phase_weight = std::sqrt(1.0 - model.phase_correlation);
  Rng drift = stream(seed, kDrift, std::uint64_t(layer));
  std::vector<double> shared(width),
      part[2] = {std::vector<double>(width), std::vector<double>(width)};
  law.anchors.resize(2 * std::size_t(law.num_anchors) * width);
  for (std::int64_t anchor = 0; anchor < law.num_anchors; ++anchor) {
    for (std::vector<double>* chain : {&shared, &part[0], &part[1]}) {
      for (double& x : *chain) {
        const double noise = standard_normal(drift);
        x = anchor == 0 ? noise : rho * x + step_noise * noise;
      }
    }
    for (std::size_t phase = 0; phase < 2; ++phase) {
      double* z =
          law.anchors.data() + (phase * std::size_t(law.num_anchors) + std::size_t(anchor)) * width;
      for (std::size_t i = 0; i < width; ++i) {
        z[i] = shared_weight * shared[i] + phase_weight * part[phase][i];
      }
    }
  }
  return law;
}

void layer_popularity(const LayerLaw& law, const ModelTopology& topology,
                      const PopularityModel& model, std::int64_t drift_passes, std::int64_t pass,
                      Phase phase, std::span<double> out) {
  const std::int64_t num_experts = topology.num_logical_experts;
  const std::int64_t experts_per_group = num_experts / topology.num_groups;
  const auto width = static_cast<std::size_t>(num_experts + topology.num_groups);
  const std::int64_t anchor = pass / drift_passes;
  MOESTAT_CHECK(anchor + 1 < law.num_anchors && pass >= 0,
                "workload: pass {} is outside the generated range", pass);
  MOESTAT_CHECK(std::int64_t(out.size()) == num_experts,
                "workload: popularity buffer holds {} values, expected {}", out.size(),
                num_experts);
  // Between anchors: a weighted mean, rescaled to unit variance (the two anchors correlate
  // drift_correlation).
  const double f = double(pass % drift_passes) / double(drift_passes);
  const double rho = model.drift_correlation;
  const double norm = std::sqrt((1 - f) * (1 - f) + f * f + 2 * f * (1 - f) * rho);
  const double* z0 = law.anchors.data() +
                     (std::size_t(phase == Phase::kPrefill ? 0 : 1) * std::size_t(law.num_anchors) +
                      std::size_t(anchor)) *
                         width;
  const double* z1 = z0 + width;
  const double group_weight = std::sqrt(model.group_share);
  const double expert_weight = std::sqrt(1.0 - model.group_share);
  const auto z = [&](std::size_t i) { return ((1 - f) * z0[i] + f * z1[i]) / norm; };
  double top = -INFINITY;
  for (std::int64_t e = 0; e < num_experts; ++e) {
    const std::size_t group = std::size_t(num_experts + e / experts_per_group);
    double log_weight = law.sigma * (group_weight * z(group) + expert_weight * z(std::size_t(e)));
    if (law.hot[std::size_t(e)] != 0) log_weight += model.hot_boost;
    out[std::size_t(e)] = log_weight;
    top = std::max(top, log_weight);
  }
  double total = 0.0;
  for (double& x : out) total += (x = std::exp(x - top));
  for (double& x : out) x /= total;
}

}  // namespace detail
}  // namespace moestat::workload
