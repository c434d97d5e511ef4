// The Prometheus text exposition (format 0.0.4) of live metrics, and its file. Metric names,
// types and labels: docs/metrics.md.
//
//   moestat::online::write_prometheus_file("/var/lib/node_exporter/moestat.prom",
//                                          metrics.update());
#pragma once

#include <filesystem>
#include <moestat/online/live_metrics.hpp>
#include <string>

namespace moestat::online {

/// The HTTP content type of prometheus_text.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

/// Every metric of `values` as Prometheus text: one family per metric, with HELP and TYPE.
std::string prometheus_text(const MetricValues& values);

/// Writes prometheus_text(values) to `path` atomically (readers such as node_exporter's
/// textfile collector see the old file or the new one); moestat::Error naming the path.
void write_prometheus_file(const std::filesystem::path& path, const MetricValues& values);

}  // namespace moestat::online
