// A small read-only HTTP server of live metrics: GET /metrics answers the Prometheus text.
// Opt-in (nothing listens until one is made), on 127.0.0.1 unless told otherwise.
//
//   moestat::online::LiveMetrics metrics(recorder);
//   moestat::online::MetricsServer server(metrics, {.port = 9400});
//   // curl http://127.0.0.1:9400/metrics
#pragma once

#include <chrono>
#include <cstddef>
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
  /// Connections open at once; one accepted beyond them is answered 503 and closed (unless it
  /// takes an idle one's place, below), so the endpoint never holds more than this many
  /// descriptors of its host (plus the listening one).
  int max_connections = 64;
  /// Connections one client address holds at once; one beyond them is answered 503 and closed.
  /// At max_connections, a new connection from an address holding fewer than another takes
  /// the place of that other's oldest idle one (waiting for its request, or answered and not
  /// yet closed by its client), which is closed (with a 503 if it had not been answered): idle
  /// sockets of one client, or of many addresses holding one each, never keep a new client's
  /// scrape out.
  int max_connections_per_client = 8;
  /// Time from accepting a connection to closing it: the request must arrive and the answer be
  /// taken within it, however the client paces its bytes. A scraper asks and reads at once.
  std::chrono::milliseconds request_timeout{10'000};
  /// Bytes of the request line and headers together; beyond them the answer is 431.
  std::size_t max_header_bytes = 8192;
  /// Header fields; beyond them the answer is 431.
  std::size_t max_header_count = 100;
};

/// Serves GET (and HEAD) /metrics from a thread of its own until stop() or destruction. Every
/// other path is 404; every other method 405; a scrape whose text fails is a 500 with the
/// message. Each connection carries one request (answered with `Connection: close`); the
/// thread waits on all of them at once, so a slow or idle client never delays another's scrape.
class MetricsServer {
 public:
  /// Serves `text()`, called once per scrape (from the server's thread).
  /// moestat::Error naming the address when it cannot listen there, or the option that is
  /// out of range.
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
