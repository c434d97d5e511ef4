// Live metrics as Prometheus text exposition format 0.0.4 (docs/metrics.md lists every
// family): names prefixed moestat_, units in the names, counters ending in _total.
#include <fmt/format.h>

#include <iterator>
#include <moestat/io/files.hpp>
#include <moestat/io/prometheus_escape.hpp>
#include <moestat/online/prometheus.hpp>
#include <string_view>

namespace moestat::online {
namespace {

class Exposition {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    fmt::format_to(out(), "# HELP {} {}\n# TYPE {} {}\n", name, io::prometheus_help_text(help),
                   name, type);
  }
  template <typename Value>
  void sample(std::string_view name, std::string_view labels, Value value) {
    // fmt's shortest round-trip form; integers print exactly.
    if (labels.empty())
      fmt::format_to(out(), "{} {}\n", name, value);
    else
      fmt::format_to(out(), "{}{{{}}} {}\n", name, labels, value);
  }
  std::string take() { return std::move(text_); }

 private:
  std::back_insert_iterator<std::string> out() { return std::back_inserter(text_); }
  std::string text_;
};

}  // namespace

std::string prometheus_text(const MetricValues& values) {
  Exposition text;
  const auto layer_label = [&](std::int64_t layer) {
    return fmt::format("layer=\"{}\"",
                       io::prometheus_label_value(values.layer_names[std::size_t(layer)]));
  };
  const auto counter = [&](std::string_view name, std::string_view help, std::int64_t value) {
    text.family(name, "counter", help);
    text.sample(name, "", value);
  };
  counter("moestat_passes_recorded_total", "Passes the recorder holds since it was started.",
          values.passes_recorded);
  counter("moestat_passes_observed_total", "Passes folded into the live metrics.",
          values.passes_observed);
  counter("moestat_passes_unobserved_total",
          "Passes that left the recorder's window before the live metrics read them.",
          values.passes_unobserved);
  counter("moestat_passes_dropped_total",
          "Passes the recorder lost because its host collector fell behind.",
          values.passes_dropped);
  counter("moestat_dropped_ids_total", "Expert ids outside the physical slots, ignored.",
          values.dropped_ids);

  text.family("moestat_last_pass_id", "gauge", "Id of the latest observed pass (-1: none).");
  text.sample("moestat_last_pass_id", "", values.last_pass_id);
  text.family("moestat_pass_balancedness_ratio", "gauge",
              "Balancedness of the latest observed pass: mean over layers of (mean GPU load + "
              "1e-5) / (max GPU load + 1e-5), as SGLang computes it.");
  text.sample("moestat_pass_balancedness_ratio", "", values.last_pass_balancedness);
  text.family("moestat_balancedness_mean_ratio", "gauge",
              "Mean pass balancedness over the latest passes (label passes: at most how many).");
  for (const BalancednessMean& mean : values.balancedness_means) {
    text.sample("moestat_balancedness_mean_ratio", fmt::format("passes=\"{}\"", mean.window),
                mean.value);
  }
  text.family("moestat_balancedness_mean_passes", "gauge",
              "Passes each balancedness mean is over now (fewer than its window at first).");
  for (const BalancednessMean& mean : values.balancedness_means) {
    text.sample("moestat_balancedness_mean_passes", fmt::format("passes=\"{}\"", mean.window),
                mean.num_passes);
  }

  const auto per_gpu = [&](std::string_view name, const std::vector<std::int64_t>& loads) {
    for (std::int64_t layer = 0; layer < values.num_layers; ++layer) {
      if (!values.moe_layers[std::size_t(layer)]) continue;
      for (std::int64_t gpu = 0; gpu < values.num_gpus; ++gpu) {
        text.sample(name, fmt::format("{},gpu=\"{}\"", layer_label(layer), gpu),
                    loads[std::size_t(layer * values.num_gpus + gpu)]);
      }
    }
  };
  text.family("moestat_pass_gpu_load_assignments", "gauge",
              "Token assignments each GPU's expert slots got in the latest observed pass.");
  per_gpu("moestat_pass_gpu_load_assignments", values.last_pass_gpu_loads);
  text.family("moestat_gpu_assignments_total", "counter",
              "Token assignments each GPU's expert slots got over every observed pass.");
  per_gpu("moestat_gpu_assignments_total", values.gpu_assignments_total);

  text.family("moestat_layer_uncovered_passes_total", "counter",
              "Passes in which a MoE layer counted nothing while other layers counted tokens "
              "(a skipped hook).");
  for (std::int64_t layer = 0; layer < values.num_layers; ++layer) {
    if (!values.moe_layers[std::size_t(layer)]) continue;
    text.sample("moestat_layer_uncovered_passes_total", layer_label(layer),
                values.uncovered_passes[std::size_t(layer)]);
  }

  text.family("moestat_hot_expert_assignments", "gauge",
              "Token assignments of the most used logical experts over the recorder's window.");
  for (const HotExpert& expert : values.hottest_experts) {
    text.sample("moestat_hot_expert_assignments",
                fmt::format("{},expert=\"{}\"", layer_label(expert.layer), expert.expert),
                expert.assignments);
  }
  return text.take();
}

void write_prometheus_file(const std::filesystem::path& path, const MetricValues& values) {
  io::write_file_atomically(path, prometheus_text(values));
}

}  // namespace moestat::online
