#include "evaluation.hpp"

#include <span>

#include "gpu_load.hpp"

namespace moestat::report::detail {
namespace {

Evaluation evaluate_one(const Recording& recording, const Placement& placement,
                        std::int64_t num_gpus, std::string name) {
  Evaluation out;
  out.name = std::move(name);
  out.gpu_loads = gpu_loads(recording.totals, placement, num_gpus);
  out.layer_balancedness = layer_balancedness(out.gpu_loads, recording.num_layers, num_gpus);
  out.balancedness = balancedness(out.layer_balancedness);
  const auto pass_size = std::size_t(recording.num_layers * recording.num_experts);
  const std::span<const std::int64_t> passes(recording.passes);
  for (std::int64_t pass = 0; pass < recording.num_passes(); ++pass) {
    const auto loads =
        gpu_loads(passes.subspan(std::size_t(pass) * pass_size, pass_size), placement, num_gpus);
    const auto layers = layer_balancedness(loads, recording.num_layers, num_gpus);
    bool any = false;
    for (double value : layers) any = any || value >= 0.0;
    out.pass_balancedness.push_back(any ? balancedness(layers) : -1.0);
  }
  return out;
}

}  // namespace

std::vector<Evaluation> evaluate(const Recording& recording, const Options& options) {
  options.validate(recording);
  std::vector<Evaluation> out;
  out.push_back(evaluate_one(recording,
                             identity_placement(recording.num_layers, recording.num_experts),
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
