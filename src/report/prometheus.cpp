// Prometheus text exposition format 0.0.4: families of gauges with HELP and TYPE lines.
#include <fmt/format.h>

#include <iterator>
#include <moestat/io/prometheus_escape.hpp>
#include <moestat/report.hpp>
#include <string_view>

#include "evaluation.hpp"

namespace moestat::report {
namespace {

void family(std::string& out, std::string_view name, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} gauge\n", name,
                 io::prometheus_help_text(help), name);
}

/// A sample value: integers exactly, others with enough digits to round-trip.
std::string value_text(double value) { return fmt::format("{}", value); }

}  // namespace

std::string prometheus_text(const Recording& recording, const Options& options) {
  recording.validate();
  // The exposition describes the whole recording, as its other families do.
  Options whole = options;
  whole.held_out_from.reset();
  const std::vector<detail::Evaluation> evaluations = detail::evaluate(recording, whole);
  const std::int64_t num_layers = recording.num_layers(), num_experts = recording.num_experts();
  const std::vector<std::int64_t> totals = recording.counts.totals();  // [L, E]
  std::vector<bool> loaded(static_cast<std::size_t>(num_layers), false);
  for (std::int64_t i = 0; i < num_layers * num_experts; ++i) {
    if (totals[std::size_t(i)] > 0) loaded[std::size_t(i / num_experts)] = true;
  }
  std::string out;
  family(out, "moestat_expert_load",
         "Token assignments routed to each logical expert over the recording.");
  for (std::int64_t layer = 0; layer < num_layers; ++layer) {
    if (!loaded[std::size_t(layer)]) continue;
    for (std::int64_t expert = 0; expert < num_experts; ++expert) {
      fmt::format_to(std::back_inserter(out),
                     "moestat_expert_load{{layer=\"{}\",expert=\"{}\"}} {}\n", layer, expert,
                     totals[std::size_t(layer * num_experts + expert)]);
    }
  }
  family(out, "moestat_gpu_load",
         "Token assignments per GPU under a placement (an expert's load split over its "
         "replicas).");
  for (const detail::Evaluation& evaluation : evaluations) {
    for (std::int64_t layer = 0; layer < num_layers; ++layer) {
      if (!loaded[std::size_t(layer)]) continue;
      for (std::int64_t gpu = 0; gpu < options.num_gpus; ++gpu) {
        fmt::format_to(
            std::back_inserter(out),
            "moestat_gpu_load{{layer=\"{}\",gpu=\"{}\",placement=\"{}\"}} {}\n", layer, gpu,
            io::prometheus_label_value(evaluation.name),
            value_text(evaluation.gpu_loads[std::size_t(layer * options.num_gpus + gpu)]));
      }
    }
  }
  family(out, "moestat_layer_balancedness",
         "Mean GPU load over max GPU load of a layer under a placement (1 = even).");
  for (const detail::Evaluation& evaluation : evaluations) {
    for (std::int64_t layer = 0; layer < num_layers; ++layer) {
      if (!loaded[std::size_t(layer)]) continue;
      fmt::format_to(std::back_inserter(out),
                     "moestat_layer_balancedness{{layer=\"{}\",placement=\"{}\"}} {}\n", layer,
                     io::prometheus_label_value(evaluation.name),
                     value_text(evaluation.layer_balancedness[std::size_t(layer)]));
    }
  }
  family(out, "moestat_balancedness",
         "Mean over layers with load of the layer balancedness under a placement.");
  for (const detail::Evaluation& evaluation : evaluations) {
    fmt::format_to(std::back_inserter(out), "moestat_balancedness{{placement=\"{}\"}} {}\n",
                   io::prometheus_label_value(evaluation.name),
                   value_text(evaluation.balancedness));
  }
  family(out, "moestat_recorded_passes", "Passes with per-pass loads in the recording.");
  fmt::format_to(std::back_inserter(out), "moestat_recorded_passes {}\n", recording.num_passes());
  return out;
}

}  // namespace moestat::report
