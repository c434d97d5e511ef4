// A small read-only HTTP server of live metrics: GET /metrics answers the Prometheus text.
// Opt-in (nothing listens until one is made), on 127.0.0.1 unless told otherwise.
//
//   moestat::online::LiveMetrics metrics(recorder);
//   moestat::online::MetricsServer server(metrics, {.port = 9400});
//   // curl http://127.0.0.1:9400/metrics
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <moestat/online/live_metrics.hpp>
#include <string>

namespace moestat::online {

struct MetricsServerOptions {
  /// Address to listen on; another address than loopback exposes the metrics to the network.
  std::string host = "127.0.0.1";
  /// TCP port; 0 picks a free one (see MetricsServer::port).
  int port = 0;
};

/// Serves GET (and HEAD) /metrics from a thread of its own until stop() or destruction. Every
/// other path is 404; POST, PUT, PATCH, DELETE and OPTIONS are 405; a scrape whose text fails
/// is a 500 with the message.
class MetricsServer {
 public:
  /// Serves `text()`, called once per scrape (from the server's thread).
  /// moestat::Error naming the address when it cannot listen there.
  MetricsServer(std::function<std::string()> text, MetricsServerOptions options = {});
  /// Serves prometheus_text(metrics.update()); `metrics` must outlive the server.
  explicit MetricsServer(LiveMetrics& metrics, MetricsServerOptions options = {});
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  /// The port it listens on (the one picked when the options said 0).
  int port() const noexcept;
  const std::string& host() const noexcept;
  /// Stops listening and joins the server's thread; idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moestat::online
