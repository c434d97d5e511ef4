// MetricsServer over cpp-httplib (Debian's libcpp-httplib): one listening thread, one worker.
#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <exception>
#include <moestat/error.hpp>
#include <moestat/online/metrics_server.hpp>
#include <moestat/online/prometheus.hpp>
#include <thread>
#include <utility>

namespace moestat::online {

struct MetricsServer::Impl {
  httplib::Server server;
  std::string host;
  int port = 0;
  std::thread thread;
  std::atomic<bool> listening_ended{false};
};

MetricsServer::MetricsServer(std::function<std::string()> text, MetricsServerOptions options)
    : impl_(std::make_unique<Impl>()) {
  MOESTAT_CHECK(options.port >= 0 && options.port <= 65535,
                "metrics server: port {} is not a TCP port (0 to 65535)", options.port);
  httplib::Server& server = impl_->server;
  // httplib's default adds SO_REUSEPORT, which lets a second server share a port in use;
  // SO_REUSEADDR alone only reuses one left in TIME_WAIT.
  server.set_socket_options([](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // One worker: scrapes are rare, and a second one would only wait on the metrics' lock.
  server.new_task_queue = [] { return new httplib::ThreadPool(1); };
  server.Get("/metrics",
             [text = std::move(text)](const httplib::Request&, httplib::Response& response) {
               try {
                 response.set_content(text(), kPrometheusContentType);
               } catch (const std::exception& failure) {
                 response.status = 500;
                 response.set_content(failure.what(), "text/plain; charset=utf-8");
               }
             });
  // Read-only: every method but GET (and the HEAD httplib derives from it) is refused.
  const auto refuse = [](const httplib::Request&, httplib::Response& response) {
    response.status = 405;
    response.set_header("Allow", "GET");
  };
  server.Post(".*", refuse);
  server.Put(".*", refuse);
  server.Patch(".*", refuse);
  server.Delete(".*", refuse);
  server.Options(".*", refuse);

  impl_->host = options.host;
  if (options.port == 0) {
    impl_->port = server.bind_to_any_port(options.host);
  } else if (server.bind_to_port(options.host, options.port)) {
    impl_->port = options.port;
  } else {
    impl_->port = -1;
  }
  MOESTAT_CHECK(impl_->port > 0, "metrics server: cannot listen on {}:{}", options.host,
                options.port);
  impl_->thread = std::thread([impl = impl_.get()] {
    impl->server.listen_after_bind();
    impl->listening_ended = true;
  });
  // NOTE: httplib's stop() does nothing until the loop runs, so a stop() right after this
  // constructor would leave the thread listening; wait for the loop (microseconds).
  while (!server.is_running() && !impl_->listening_ended) std::this_thread::yield();
}

MetricsServer::MetricsServer(LiveMetrics& metrics, MetricsServerOptions options)
    : MetricsServer([&metrics] { return prometheus_text(metrics.update()); }, std::move(options)) {}

MetricsServer::~MetricsServer() { stop(); }

int MetricsServer::port() const noexcept { return impl_->port; }

const std::string& MetricsServer::host() const noexcept { return impl_->host; }

void MetricsServer::stop() {
  if (!impl_->thread.joinable()) return;
  impl_->server.stop();
  impl_->thread.join();
}

}  // namespace moestat::online
