// online::MetricsServer: GET /metrics answers the text with Prometheus' content type; every
// other path or method is refused; a failing scrape is a 500; stop() ends it. A real HTTP
// client (cpp-httplib's) talks to it over loopback. (tests/python/test_live_metrics.py
// scrapes a running recorder with urllib and prometheus_client's parser.)
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <moestat/online/metrics_server.hpp>
#include <moestat/online/prometheus.hpp>
#include <stdexcept>
#include <string>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

using online::MetricsServer;

TEST(MetricsServer, ServesTheTextOnLoopbackOnly) {
  std::atomic<int> scrapes = 0;
  MetricsServer server([&] { return "moestat_scrapes " + std::to_string(++scrapes) + "\n"; });
  ASSERT_GT(server.port(), 0);
  EXPECT_EQ(server.host(), "127.0.0.1");
  httplib::Client client("127.0.0.1", server.port());
  for (int scrape = 1; scrape <= 2; ++scrape) {
    const httplib::Result response = client.Get("/metrics");
    ASSERT_TRUE(response) << httplib::to_string(response.error());
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->get_header_value("Content-Type"), online::kPrometheusContentType);
    EXPECT_EQ(response->body, "moestat_scrapes " + std::to_string(scrape) + "\n");
  }
  EXPECT_EQ(client.Get("/")->status, 404);
  EXPECT_EQ(client.Get("/metrics/x")->status, 404);
  EXPECT_EQ(client.Post("/metrics", "x", "text/plain")->status, 405);
  EXPECT_EQ(client.Delete("/metrics")->status, 405);
  EXPECT_EQ(client.Options("/metrics")->status, 405);
  EXPECT_EQ(client.Head("/metrics")->status, 200);
  EXPECT_EQ(scrapes, 3);  // HEAD makes the text too
  server.stop();
  server.stop();  // idempotent
  EXPECT_FALSE(client.Get("/metrics"));
}

TEST(MetricsServer, AFailingScrapeIsA500WithTheMessage) {
  MetricsServer server([]() -> std::string { throw std::runtime_error("no snapshot today"); });
  httplib::Client client("127.0.0.1", server.port());
  const httplib::Result response = client.Get("/metrics");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 500);
  EXPECT_EQ(response->body, "no snapshot today");
}

TEST(MetricsServer, NamesAnAddressItCannotListenOn) {
  MetricsServer first([] { return std::string(); });
  EXPECT_MOESTAT_ERROR(MetricsServer([] { return std::string(); }, {.port = first.port()}),
                       "cannot listen on 127.0.0.1:" + std::to_string(first.port()));
  EXPECT_MOESTAT_ERROR(MetricsServer([] { return std::string(); }, {.port = 70000}),
                       "port 70000 is not a TCP port");
}

}  // namespace
}  // namespace moestat
