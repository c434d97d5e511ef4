// The rebalancing rules engines ship: never, every N passes, and every N passes below a
// utilisation threshold (SGLang's EPLBManager; vLLM's EPLB state without a threshold).
#include <fmt/format.h>

#include <moestat/error.hpp>
#include <moestat/plan/advisor.hpp>
#include <moestat/plan/loads.hpp>
#include <moestat/plan/rebalance_policy.hpp>
#include <moestat/plan/replan.hpp>

namespace moestat::plan {
namespace {

class NeverPolicy final : public RebalancePolicy {
 public:
  std::string name() const override { return "never"; }
  std::int64_t check_every() const override { return 0; }
  std::int64_t window_passes() const override { return 0; }
  std::optional<Placement> decide(const RebalanceView&) override { return std::nullopt; }
};

Placement replan(const RebalanceView& view, Replanner replanner) {
  const ExpertLoads loads = loads_of(view.window);
  if (replanner == Replanner::kDeepseek) return plan_deepseek(loads, view.config);
  return replan_with_few_copies(view.placement, {&loads, 1}, view.config).placement;
}

std::string replanner_suffix(Replanner replanner) {
  return replanner == Replanner::kFewCopies ? ", few copies" : "";
}

/// Replans every `every` passes when the window's served balancedness is at most `threshold`
/// (1 or more: always, the interval rule).
class CadencePolicy final : public RebalancePolicy {
 public:
  CadencePolicy(const Cadence& cadence, double threshold)
      : cadence_(cadence), threshold_(threshold) {
    MOESTAT_CHECK(cadence.every >= 1 && cadence.window >= 1,
                  "a rebalance interval and window must be at least one pass (got {} and {})",
                  cadence.every, cadence.window);
    MOESTAT_CHECK(threshold >= 0.0 && threshold <= 1.0,
                  "a balancedness threshold must be in [0, 1], got {}", threshold);
  }

  std::string name() const override {
    if (threshold_ >= 1.0) {
      return fmt::format("every {} (window {}{})", cadence_.every, cadence_.window,
                         replanner_suffix(cadence_.replanner));
    }
    return fmt::format("below {:.2f}, checked every {}{}", threshold_, cadence_.every,
                       replanner_suffix(cadence_.replanner));
  }
  std::int64_t check_every() const override { return cadence_.every; }
  std::int64_t window_passes() const override { return cadence_.window; }

  std::optional<Placement> decide(const RebalanceView& view) override {
    // SGLang skips when utilisation is above the threshold, so equal to it rebalances.
    if (view.window_balancedness > threshold_) return std::nullopt;
    return replan(view, cadence_.replanner);
  }

 private:
  Cadence cadence_;
  double threshold_;
};

class AdvisorPolicy final : public RebalancePolicy {
 public:
  AdvisorPolicy(const Cadence& cadence, const AdvisorOptions& options)
      : cadence_(cadence), options_(options) {
    MOESTAT_CHECK(cadence.every >= 1 && cadence.window >= 1,
                  "the advisor's interval and window must be at least one pass (got {} and {})",
                  cadence.every, cadence.window);
  }
  std::string name() const override {
    return fmt::format("advisor every {} (window {}, horizon {})", cadence_.every, cadence_.window,
                       options_.horizon_passes);
  }
  std::int64_t check_every() const override { return cadence_.every; }
  std::int64_t window_passes() const override { return cadence_.window; }
  std::optional<Placement> decide(const RebalanceView& view) override {
    // The advisor plans on older rows and judges on newer ones: it needs two rows.
    if (view.window.window_size < 2) return std::nullopt;
    RebalanceAdvice advice = advise_rebalance(view.placement, view.window, view.config, options_);
    if (!advice.rebalance) return std::nullopt;
    return std::move(advice.placement);
  }

 private:
  Cadence cadence_;
  AdvisorOptions options_;
};

}  // namespace

std::unique_ptr<RebalancePolicy> never_policy() { return std::make_unique<NeverPolicy>(); }

std::unique_ptr<RebalancePolicy> interval_policy(const Cadence& cadence) {
  return std::make_unique<CadencePolicy>(cadence, 1.0);
}

std::unique_ptr<RebalancePolicy> threshold_policy(const Cadence& cadence, double threshold) {
  return std::make_unique<CadencePolicy>(cadence, threshold);
}

std::unique_ptr<RebalancePolicy> advisor_policy(const Cadence& cadence,
                                                const AdvisorOptions& options) {
  return std::make_unique<AdvisorPolicy>(cadence, options);
}

}  // namespace moestat::plan
