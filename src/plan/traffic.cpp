// Traffic phases and the sampler that draws a scenario's passes from them.
#include <cmath>
#include <moestat/error.hpp>
#include <moestat/plan/traffic.hpp>
#include <numbers>

namespace moestat::plan {

double NormalDraws::next() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  // Box-Muller: two independent normals from two uniforms.
  const double radius = std::sqrt(-2.0 * std::log(1.0 - rng_.uniform()));  // log of (0, 1]
  const double angle = 2.0 * std::numbers::pi * rng_.uniform();
  spare_ = radius * std::sin(angle);
  has_spare_ = true;
  return radius * std::cos(angle);
}

TrafficPhase make_phase(std::string name, const ExpertLoads& loads, const PassShape& shape) {
  loads.validate();
  MOESTAT_CHECK(shape.num_passes >= 1 && shape.tokens_per_pass >= 1 && shape.top_k >= 1,
                "phase '{}': passes, tokens per pass and top-k must be at least 1 (got {}, {}, {})",
                name, shape.num_passes, shape.tokens_per_pass, shape.top_k);
  MOESTAT_CHECK(std::isfinite(shape.jitter) && shape.jitter >= 0.0,
                "phase '{}': jitter must be finite and >= 0, got {}", name, shape.jitter);
  MOESTAT_CHECK(shape.top_k <= loads.num_experts, "phase '{}': top-k {} exceeds the {} experts",
                name, shape.top_k, loads.num_experts);
  return {std::move(name), normalised_per_layer(loads), shape};
}

std::int64_t TrafficScenario::num_passes() const {
  std::int64_t total = 0;
  for (const TrafficPhase& phase : phases) total += phase.shape.num_passes;
  return total;
}

void TrafficScenario::validate() const {
  MOESTAT_CHECK(!phases.empty(), "scenario '{}' has no phase", name);
  for (const TrafficPhase& phase : phases) {
    MOESTAT_CHECK(phase.shares.num_layers == phases.front().shares.num_layers &&
                      phase.shares.num_experts == phases.front().shares.num_experts,
                  "scenario '{}': phase '{}' is [{}, {}], phase '{}' is [{}, {}]", name, phase.name,
                  phase.shares.num_layers, phase.shares.num_experts, phases.front().name,
                  phases.front().shares.num_layers, phases.front().shares.num_experts);
    MOESTAT_CHECK(phase.shape.num_passes >= 1, "scenario '{}': phase '{}' has no pass", name,
                  phase.name);
  }
}

TrafficSampler::TrafficSampler(const TrafficScenario& scenario, std::uint64_t seed)
    : scenario_(scenario), normal_(seed) {
  scenario_.validate();
}

bool TrafficSampler::next(ExpertLoads& pass) {
  if (drawn_in_phase_ == scenario_.phases[std::size_t(phase_)].shape.num_passes) {
    if (phase_ + 1 == std::int64_t(scenario_.phases.size())) return false;
    ++phase_;
    drawn_in_phase_ = 0;
  }
  const TrafficPhase& phase = scenario_.phases[std::size_t(phase_)];
  const ExpertLoads& shares = phase.shares;
  pass.num_layers = shares.num_layers;
  pass.num_experts = shares.num_experts;
  pass.values.assign(shares.values.size(), 0.0);
  jittered_.resize(std::size_t(shares.num_experts));
  const double n = double(phase.shape.tokens_per_pass) * double(phase.shape.top_k);
  const double sigma = phase.shape.jitter;
  for (std::int64_t l = 0; l < shares.num_layers; ++l) {
    const auto row = shares.row(l);
    double total = 0.0;
    for (std::size_t e = 0; e < row.size(); ++e) {
      jittered_[e] = row[e] * std::exp(sigma * normal_.next() - 0.5 * sigma * sigma);
      total += jittered_[e];
    }
    if (total <= 0.0) continue;  // a dense layer stays empty
    double* out = pass.values.data() + l * shares.num_experts;
    for (std::size_t e = 0; e < row.size(); ++e) {
      const double p = jittered_[e] / total;
      const double mean = n * p;
      const double draw = mean + std::sqrt(mean * (1.0 - p)) * normal_.next();
      out[e] = std::round(std::max(0.0, draw));
    }
  }
  ++drawn_;
  ++drawn_in_phase_;
  return true;
}

}  // namespace moestat::plan
