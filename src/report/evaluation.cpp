#include "evaluation.hpp"

#include <moestat/plan/loads.hpp>
#include <moestat/plan/metrics.hpp>

namespace moestat::report::detail {
namespace {

// The metrics are the planners' (include/moestat/plan/metrics.hpp), so a report, `moestat
// eval` and the demo's held-out figures always agree.
Evaluation evaluate_one(const Recording& recording, const Placement& placement,
                        std::int64_t num_gpus, const JudgedPasses& judged, std::string name) {
  Evaluation out;
  out.name = std::move(name);
  const plan::ExpertLoads totals = judged.held_out
                                       ? plan::loads_of(recording.counts, judged.begin, judged.end)
                                       : plan::loads_of(recording.counts);
  out.gpu_loads = plan::gpu_loads(totals, placement, num_gpus);
  const plan::BalanceReport report = plan::evaluate_placement(totals, placement, num_gpus);
  out.layer_balancedness = report.layer_balancedness;
  for (std::int64_t layer = 0; layer < recording.num_layers(); ++layer) {
    if (totals.layer_total(layer) <= 0.0) out.layer_balancedness[std::size_t(layer)] = -1.0;
  }
  out.balancedness = report.balancedness;
  for (std::int64_t pass = 0; pass < recording.num_passes(); ++pass) {
    const plan::BalanceReport pass_report = plan::evaluate_placement(
        plan::loads_of(recording.counts, pass, pass + 1), placement, num_gpus);
    out.pass_balancedness.push_back(pass_report.num_loaded_layers > 0 ? pass_report.balancedness
                                                                      : -1.0);
  }
  return out;
}

}  // namespace

JudgedPasses judged_passes(const Recording& recording, const Options& options) {
  if (!options.held_out_from) return {.begin = 0, .end = recording.num_passes()};
  return {.begin = *options.held_out_from, .end = recording.num_passes(), .held_out = true};
}

std::vector<Evaluation> evaluate(const Recording& recording, const Options& options) {
  options.validate(recording);
  const JudgedPasses judged = judged_passes(recording, options);
  std::vector<Evaluation> out;
  // Expert e of every layer on its own slot e, so on GPU e / (E / num_gpus).
  out.push_back(evaluate_one(
      recording,
      Placement::trivial(recording.num_layers(), recording.num_experts(), recording.num_experts()),
      options.num_gpus, judged, std::string(kIdentityName)));
  for (const NamedPlacement& placement : options.placements) {
    out.push_back(
        evaluate_one(recording, placement.placement, options.num_gpus, judged, placement.name));
  }
  return out;
}

}  // namespace moestat::report::detail

namespace moestat::report {

std::vector<PlacementBalancedness> balancedness(const Recording& recording,
                                                const Options& options) {
  recording.validate();
  std::vector<PlacementBalancedness> out;
  for (const detail::Evaluation& evaluation : detail::evaluate(recording, options)) {
    out.push_back({.name = evaluation.name, .balancedness = evaluation.balancedness});
  }
  return out;
}

}  // namespace moestat::report
