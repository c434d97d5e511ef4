#include "evaluation.hpp"

#include <moestat/plan/loads.hpp>
#include <moestat/plan/metrics.hpp>
#include <numeric>
#include <span>

namespace moestat::report::detail {
namespace {

// The metrics are the planners' (include/moestat/plan/metrics.hpp), so a report, `moestat
// eval` and the demo's held-out figures always agree.
/// plan::served_balancedness of `passes`; nullopt when there are none.
std::optional<double> served_on(const Recording& recording, std::span<const std::int64_t> passes,
                                const Placement& placement, std::int64_t num_gpus) {
  if (passes.empty()) return std::nullopt;
  return plan::served_balancedness(recording.counts, passes, placement, num_gpus);
}

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
  if (recording.num_passes() > 0) {
    const PassSets sets = judged_pass_sets(recording, judged);
    out.served = Served{.all = served_on(recording, sets.all, placement, num_gpus).value_or(1.0),
                        .decode = served_on(recording, sets.decode, placement, num_gpus),
                        .prefill = served_on(recording, sets.prefill, placement, num_gpus)};
  }
  return out;
}

}  // namespace

JudgedPasses judged_passes(const Recording& recording, const Options& options) {
  if (!options.held_out_from) return {.begin = 0, .end = recording.num_passes()};
  return {.begin = *options.held_out_from, .end = recording.num_passes(), .held_out = true};
}

PassSets judged_pass_sets(const Recording& recording, const JudgedPasses& judged) {
  PassSets out;
  const std::vector<std::int64_t>& tokens = recording.counts.pass_rows.pass_num_tokens;
  double decode_load = 0.0, load = 0.0;
  for (std::int64_t pass = judged.begin; pass < judged.end; ++pass) {
    out.all.push_back(pass);
    const auto row = recording.counts.counts.begin() + pass * recording.counts.pass_size();
    const double pass_load =
        double(std::accumulate(row, row + recording.counts.pass_size(), std::int64_t{0}));
    load += pass_load;
    if (tokens.empty()) continue;
    const bool decode = tokens[std::size_t(pass)] < kPrefillMinTokens;
    (decode ? out.decode : out.prefill).push_back(pass);
    if (decode) decode_load += pass_load;
  }
  out.decode_load_share = load > 0.0 ? decode_load / load : 0.0;
  return out;
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
