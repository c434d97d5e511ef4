#include "evaluation.hpp"

#include <moestat/plan/loads.hpp>
#include <moestat/plan/metrics.hpp>

namespace moestat::report::detail {
namespace {

// The metrics are the planners' (include/moestat/plan/metrics.hpp), so a report and
// `moestat eval` always agree.
Evaluation evaluate_one(const Recording& recording, const Placement& placement,
                        std::int64_t num_gpus, std::string name) {
  Evaluation out;
  out.name = std::move(name);
  const plan::ExpertLoads totals = plan::loads_of(recording.counts);
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

std::vector<Evaluation> evaluate(const Recording& recording, const Options& options) {
  options.validate(recording);
  std::vector<Evaluation> out;
  // Expert e of every layer on its own slot e, so on GPU e / (E / num_gpus).
  out.push_back(evaluate_one(
      recording,
      Placement::trivial(recording.num_layers(), recording.num_experts(), recording.num_experts()),
      options.num_gpus, "identity"));
  if (options.placement) {
    out.push_back(evaluate_one(recording, *options.placement, options.num_gpus, "planned"));
  }
  return out;
}

}  // namespace moestat::report::detail

namespace moestat::report {

Balancedness balancedness(const Recording& recording, const Options& options) {
  recording.validate();
  const std::vector<detail::Evaluation> evaluations = detail::evaluate(recording, options);
  Balancedness out{.identity = evaluations[0].balancedness};
  if (evaluations.size() > 1) out.planned = evaluations[1].balancedness;
  return out;
}

}  // namespace moestat::report
