// Live metrics of a running recorder, their Prometheus text and file, and the HTTP endpoint.
// docs/metrics.md.
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstddef>
#include <moestat/error.hpp>
#include <moestat/online/live_metrics.hpp>
#include <moestat/online/prometheus.hpp>
#ifdef MOESTAT_HAS_HTTP
#include <moestat/online/metrics_server.hpp>
#endif

#include "arrays.hpp"
#include "bindings.hpp"

namespace moestat::python {

using namespace nb::literals;

namespace {

nb::object layers_by_gpus(const online::MetricValues& values,
                          const std::vector<std::int64_t>& loads) {
  return to_numpy(loads, {std::size_t(values.num_layers), std::size_t(values.num_gpus)});
}

}  // namespace

void bind_online(nb::module_& module) {
  using online::MetricValues;
  nb::class_<online::HotExpert>(module, "HotExpert",
                                "A logical expert of a layer and its assignments.")
      .def_ro("layer", &online::HotExpert::layer)
      .def_ro("expert", &online::HotExpert::expert)
      .def_ro("assignments", &online::HotExpert::assignments)
      .def("__repr__", [](const online::HotExpert& e) {
        return "HotExpert(layer=" + std::to_string(e.layer) +
               ", expert=" + std::to_string(e.expert) +
               ", assignments=" + std::to_string(e.assignments) + ")";
      });
  nb::class_<online::BalancednessMean>(module, "BalancednessMean",
                                       "The mean balancedness of the latest passes.")
      .def_ro("window", &online::BalancednessMean::window, "passes it is over at most")
      .def_ro("num_passes", &online::BalancednessMean::num_passes, "passes it is over now")
      .def_ro("value", &online::BalancednessMean::value);

  nb::class_<MetricValues>(module, "MetricValues", "What one LiveMetrics.update() read.")
      .def_ro("num_layers", &MetricValues::num_layers)
      .def_ro("num_gpus", &MetricValues::num_gpus)
      .def_ro("layer_names", &MetricValues::layer_names)
      .def_ro("passes_recorded", &MetricValues::passes_recorded)
      .def_ro("passes_observed", &MetricValues::passes_observed)
      .def_ro("passes_unobserved", &MetricValues::passes_unobserved)
      .def_ro("passes_dropped", &MetricValues::passes_dropped)
      .def_ro("dropped_ids", &MetricValues::dropped_ids)
      .def_ro("last_pass_id", &MetricValues::last_pass_id)
      .def_ro("last_pass_balancedness", &MetricValues::last_pass_balancedness)
      .def_prop_ro(
          "last_pass_gpu_loads",
          [](const MetricValues& v) { return layers_by_gpus(v, v.last_pass_gpu_loads); },
          "[L, G] int64 assignments per GPU in the latest observed pass")
      .def_prop_ro(
          "gpu_assignments_total",
          [](const MetricValues& v) { return layers_by_gpus(v, v.gpu_assignments_total); },
          "[L, G] int64 assignments per GPU over every observed pass")
      .def_ro("balancedness_means", &MetricValues::balancedness_means,
              "over the latest 10, 100 and 1000 passes")
      .def_prop_ro(
          "uncovered_passes",
          [](const MetricValues& v) {
            return to_numpy(v.uncovered_passes, {std::size_t(v.num_layers)});
          },
          "[L] int64 passes in which the MoE layer counted nothing while others counted")
      .def("uncovered_layers", &MetricValues::uncovered_layers,
           "Names of the layers with uncovered passes.")
      .def_ro("hottest_experts", &MetricValues::hottest_experts);

  nb::class_<online::LiveMetrics>(
      module, "LiveMetrics",
      "Live metrics of a recorder (stat, stat_approx or per_pass mode), from its new passes.")
      .def(
          "__init__",
          [](online::LiveMetrics* self, const Recorder& recorder, std::int64_t num_gpus,
             std::int64_t num_hottest_experts, std::vector<std::string> layer_names) {
            new (self) online::LiveMetrics(recorder, {.num_gpus = num_gpus,
                                                      .num_hottest_experts = num_hottest_experts,
                                                      .layer_names = std::move(layer_names)});
          },
          "recorder"_a, nb::kw_only(), "num_gpus"_a = 0, "num_hottest_experts"_a = 10,
          "layer_names"_a = std::vector<std::string>(), nb::keep_alive<1, 2>(),
          "num_gpus 0 takes the topology's ep_size; layer_names (empty: indices) label layers.")
      .def("update", &online::LiveMetrics::update, nb::call_guard<nb::gil_scoped_release>(),
           "Folds the passes recorded since the last update; returns the MetricValues.");

  module.def("prometheus_text", &online::prometheus_text, "values"_a,
             "The Prometheus text exposition (format 0.0.4) of MetricValues.");
  module.def("write_prometheus_file", &online::write_prometheus_file, "path"_a, "values"_a,
             nb::call_guard<nb::gil_scoped_release>(),
             "Writes prometheus_text(values) to path atomically.");
  module.attr("prometheus_content_type") = online::kPrometheusContentType;

#ifdef MOESTAT_HAS_HTTP
  nb::class_<online::MetricsServer>(
      module, "MetricsServer",
      "Serves GET /metrics (Prometheus text of LiveMetrics.update()) from a thread of its own.")
      .def(
          "__init__",
          [](online::MetricsServer* self, online::LiveMetrics& metrics, std::string host, int port,
             int max_connections, int max_connections_per_client, double request_timeout,
             std::size_t max_header_bytes, std::size_t max_header_count) {
            // NaN, infinity and negatives are refused before the conversion (undefined for them);
            // whole milliseconds, rounded up, so that a positive timeout stays positive.
            MOESTAT_CHECK(request_timeout > 0 && request_timeout <= 1e9,
                          "metrics server: request_timeout {} s is not a positive number of "
                          "seconds (at most 1e9)",
                          request_timeout);
            const auto timeout = std::chrono::ceil<std::chrono::milliseconds>(
                std::chrono::duration<double>(request_timeout));
            new (self) online::MetricsServer(
                metrics, {.host = std::move(host),
                          .port = port,
                          .max_connections = max_connections,
                          .max_connections_per_client = max_connections_per_client,
                          .request_timeout = timeout,
                          .max_header_bytes = max_header_bytes,
                          .max_header_count = max_header_count});
          },
          "metrics"_a, nb::kw_only(), "host"_a = "127.0.0.1", "port"_a = 0,
          "max_connections"_a = online::MetricsServerOptions{}.max_connections,
          "max_connections_per_client"_a =
              online::MetricsServerOptions{}.max_connections_per_client,
          "request_timeout"_a =
              std::chrono::duration<double>(online::MetricsServerOptions{}.request_timeout).count(),
          "max_header_bytes"_a = online::MetricsServerOptions{}.max_header_bytes,
          "max_header_count"_a = online::MetricsServerOptions{}.max_header_count,
          nb::keep_alive<1, 2>(),
          "port 0 picks a free port; another host than loopback exposes the metrics. At most "
          "max_connections at once, max_connections_per_client of one client address (503 "
          "beyond; at max_connections a new client takes the place of an idle connection of "
          "an address holding more); each closed request_timeout seconds after it was "
          "accepted; request heads over max_header_bytes or max_header_count are 431.")
      .def_prop_ro("port", &online::MetricsServer::port)
      .def_prop_ro("host", &online::MetricsServer::host)
      .def("stop", &online::MetricsServer::stop, nb::call_guard<nb::gil_scoped_release>(),
           "Stops serving; idempotent.")
      .def(
          "__enter__", [](online::MetricsServer& self) -> online::MetricsServer& { return self; },
          nb::rv_policy::reference)
      .def(
          "__exit__",
          [](online::MetricsServer& self, nb::handle, nb::handle, nb::handle) {
            nb::gil_scoped_release unlocked;
            self.stop();
          },
          "exc_type"_a.none(), "exc_value"_a.none(), "traceback"_a.none());
#endif
}

}  // namespace moestat::python
