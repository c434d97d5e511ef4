// online::MetricsServer over real loopback sockets: GET /metrics answers the text with
// Prometheus' content type; every other path or method is refused; a failing scrape is a 500;
// stop() ends it. Then the hostile clients: idle and trickling connections do not hold up a
// scrape, a trickle cannot stretch the request deadline, connections beyond the cap are
// refused, one client's idle connections (from one address or many) do not keep another's
// scrape out, heads over the limits are 431. Every wait is bounded by the server's configured
// deadline or the client's safety net, never a timed assertion.
// (tests/python/test_live_metrics.py scrapes a running recorder with urllib and
// prometheus_client's parser.)
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <moestat/online/metrics_server.hpp>
#include <moestat/online/prometheus.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

using namespace std::chrono_literals;
using online::MetricsServer;
using online::MetricsServerOptions;

/// The server's address for every client: 127.0.0.1.
constexpr const char* kServerAddress = "127.0.0.1";

sockaddr_in loopback_address(const char* address, int port) {
  sockaddr_in socket_address{};
  socket_address.sin_family = AF_INET;
  socket_address.sin_port = htons(static_cast<std::uint16_t>(port));
  inet_pton(AF_INET, address, &socket_address.sin_addr);
  return socket_address;
}

/// A loopback client, connecting from `source` (any of 127.0.0.0/8 is this machine, so each
/// stands for another client to the server). Each read or write waits at most 30 s (the
/// safety net: a server that never answers fails the test rather than hanging it).
class Client {
 public:
  explicit Client(int port, const char* source = kServerAddress)
      : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    const timeval safety_net{.tv_sec = 30, .tv_usec = 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &safety_net, sizeof(safety_net));
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &safety_net, sizeof(safety_net));
    const sockaddr_in from = loopback_address(source, 0);
    const sockaddr_in to = loopback_address(kServerAddress, port);
    connected_ = bind(fd_, reinterpret_cast<const sockaddr*>(&from), sizeof(from)) == 0 &&
                 connect(fd_, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) == 0;
  }
  ~Client() { close(fd_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool connected() const { return connected_; }

  /// False once the server has closed (or reset) the connection.
  bool send_all(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t sent = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (sent <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(sent));
    }
    return true;
  }

  /// Everything the server sends until it closes; nullopt if the safety net ran out first.
  std::optional<std::string> read_to_end() {
    std::string received;
    char chunk[4096];
    while (true) {
      const ssize_t got = recv(fd_, chunk, sizeof(chunk), 0);
      if (got > 0) {
        received.append(chunk, static_cast<std::size_t>(got));
      } else if (got == 0 || errno == ECONNRESET) {
        return received;
      } else if (errno != EINTR) {
        return std::nullopt;
      }
    }
  }

  /// Whether the server has closed the connection, without waiting.
  bool closed_by_server() {
    const ssize_t got = peek();
    return got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

  /// Whether the server has answered (a refusal, say) or closed, without waiting.
  bool heard_from_server() {
    const ssize_t got = peek();
    return got >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
  }

 private:
  ssize_t peek() {
    char byte = 0;
    return recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  }

  int fd_;
  bool connected_ = false;
};

struct Reply {
  int status = 0;  // 0: no answer before the server closed
  std::string head;
  std::string body;
};

Reply parse_reply(const std::string& raw) {
  Reply reply;
  const std::size_t head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || head_end == std::string::npos) return reply;
  reply.status = std::stoi(raw.substr(9, 3));
  reply.head = raw.substr(0, head_end + 2);
  reply.body = raw.substr(head_end + 4);
  return reply;
}

/// Sends `request` on `client` and reads the answer.
Reply ask(Client& client, std::string_view request) {
  if (!client.connected() || !client.send_all(request)) return {};
  return parse_reply(client.read_to_end().value_or(""));
}

/// Sends `request` on a fresh connection from `source` and reads the answer.
Reply ask(int port, std::string_view request, const char* source = kServerAddress) {
  Client client(port, source);
  return ask(client, request);
}

std::string request_of(std::string_view method, std::string_view target) {
  return std::string(method) + " " + std::string(target) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
}

Reply get_metrics(int port, const char* source = kServerAddress) {
  return ask(port, request_of("GET", "/metrics"), source);
}

/// `count` connections from `source`, left idle.
std::vector<std::unique_ptr<Client>> idle_clients(int port, const char* source, int count) {
  std::vector<std::unique_ptr<Client>> clients;
  for (int index = 0; index < count; ++index) {
    clients.push_back(std::make_unique<Client>(port, source));
    EXPECT_TRUE(clients.back()->connected()) << source << " #" << index;
  }
  return clients;
}

std::string numbered_fields(int count) {
  std::string fields;
  for (int field = 0; field < count; ++field) fields += "X-" + std::to_string(field) + ": y\r\n";
  return fields;
}

MetricsServer constant_server(MetricsServerOptions options = {}) {
  return MetricsServer([] { return std::string("moestat_up 1\n"); }, std::move(options));
}

TEST(MetricsServer, ServesTheTextOnLoopbackOnly) {
  std::atomic<int> scrapes = 0;
  MetricsServer server([&] { return "moestat_scrapes " + std::to_string(++scrapes) + "\n"; });
  ASSERT_GT(server.port(), 0);
  EXPECT_EQ(server.host(), "127.0.0.1");
  for (int scrape = 1; scrape <= 2; ++scrape) {
    const Reply reply = get_metrics(server.port());
    EXPECT_EQ(reply.status, 200);
    EXPECT_NE(reply.head.find(std::string("\r\nContent-Type: ") + online::kPrometheusContentType +
                              "\r\n"),
              std::string::npos)
        << reply.head;
    EXPECT_NE(reply.head.find("\r\nConnection: close\r\n"), std::string::npos) << reply.head;
    EXPECT_EQ(reply.body, "moestat_scrapes " + std::to_string(scrape) + "\n");
  }
  EXPECT_EQ(ask(server.port(), request_of("GET", "/metrics?name=x")).status, 200);
  EXPECT_EQ(ask(server.port(), request_of("GET", "/")).status, 404);
  EXPECT_EQ(ask(server.port(), request_of("GET", "/metrics/x")).status, 404);
  EXPECT_EQ(
      ask(server.port(), "POST /metrics HTTP/1.1\r\nContent-Length: 1\r\nHost: 127.0.0.1\r\n\r\nx")
          .status,
      405);
  for (const char* method : {"PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "BREW"}) {
    const Reply refused = ask(server.port(), request_of(method, "/metrics"));
    EXPECT_EQ(refused.status, 405) << method;
    EXPECT_NE(refused.head.find("\r\nAllow: GET, HEAD\r\n"), std::string::npos) << method;
  }
  EXPECT_EQ(ask(server.port(), "nonsense\r\n\r\n").status, 400);
  EXPECT_EQ(ask(server.port(), "GET /metrics HTTP/2.0\r\n\r\n").status, 400);
  const Reply head = ask(server.port(), request_of("HEAD", "/metrics"));
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
  EXPECT_NE(head.head.find("\r\nContent-Length: 18\r\n"), std::string::npos) << head.head;
  EXPECT_EQ(scrapes, 4);  // HEAD makes the text too
  server.stop();
  server.stop();  // idempotent
  EXPECT_FALSE(Client(server.port()).connected());
}

TEST(MetricsServer, AFailingScrapeIsA500WithTheMessage) {
  MetricsServer server([]() -> std::string { throw std::runtime_error("no snapshot today"); });
  const Reply reply = get_metrics(server.port());
  EXPECT_EQ(reply.status, 500);
  EXPECT_EQ(reply.body, "no snapshot today");
}

TEST(MetricsServer, NamesAnAddressItCannotListenOnAndOptionsOutOfRange) {
  MetricsServer first = constant_server();
  EXPECT_MOESTAT_ERROR(constant_server({.port = first.port()}),
                       "cannot listen on 127.0.0.1:" + std::to_string(first.port()));
  EXPECT_MOESTAT_ERROR(constant_server({.port = 70000}), "port 70000 is not a TCP port");
  EXPECT_MOESTAT_ERROR(constant_server({.max_connections = 0}),
                       "max_connections 0 is not positive");
  EXPECT_MOESTAT_ERROR(constant_server({.max_connections_per_client = 0}),
                       "max_connections_per_client 0 is not positive");
  EXPECT_MOESTAT_ERROR(constant_server({.request_timeout = 0ms}),
                       "request_timeout 0 ms is not positive");
  EXPECT_MOESTAT_ERROR(constant_server({.request_timeout = std::chrono::milliseconds::max()}),
                       "is over a year");
  EXPECT_MOESTAT_ERROR(constant_server({.max_header_bytes = 0}), "max_header_bytes is 0");
}

TEST(MetricsServer, IdleAndTricklingClientsDoNotHoldUpAScrape) {
  // A deadline far beyond the test, so that both are still connected when the scrape ends:
  // a server that served them in turn would answer only after closing them.
  MetricsServer server = constant_server({.request_timeout = 600s});
  Client idle(server.port());
  Client trickler(server.port());
  ASSERT_TRUE(idle.connected() && trickler.connected());
  ASSERT_TRUE(trickler.send_all("GET /metrics HTTP/1.1\r\nHo"));
  for (int scrape = 0; scrape < 3; ++scrape) {
    EXPECT_EQ(get_metrics(server.port()).status, 200);
    ASSERT_TRUE(trickler.send_all("s"));
  }
  EXPECT_FALSE(idle.closed_by_server());
  EXPECT_FALSE(trickler.closed_by_server());
  // The trickler, done at last, is answered too.
  ASSERT_TRUE(trickler.send_all("t: 127.0.0.1\r\n\r\n"));
  EXPECT_EQ(parse_reply(trickler.read_to_end().value_or("")).status, 200);
}

TEST(MetricsServer, ATrickleCannotStretchTheRequestDeadline) {
  // A byte every 10 ms would reset a per-read timeout of 200 ms forever; the deadline counts
  // from the accept. Header room enough that only the deadline can end it.
  MetricsServer server = constant_server({.request_timeout = 200ms, .max_header_bytes = 1 << 20});
  Client trickler(server.port());
  ASSERT_TRUE(trickler.send_all("GET /metrics HTTP/1.1\r\nX-Slow: "));
  int bytes_sent = 0;
  for (; bytes_sent < 3000 && !trickler.closed_by_server(); ++bytes_sent) {
    if (!trickler.send_all("y")) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_LT(bytes_sent, 3000) << "still connected after 30 s of trickling";
  // An idle connection is closed at the deadline too, without an answer.
  Client idle(server.port());
  EXPECT_EQ(idle.read_to_end(), std::optional<std::string>(""));
  EXPECT_EQ(get_metrics(server.port()).status, 200);
}

TEST(MetricsServer, ConnectionsBeyondTheCapAreRefused) {
  constexpr int kCap = 4;
  MetricsServer server = constant_server({.max_connections = kCap, .request_timeout = 600s});
  std::vector<std::unique_ptr<Client>> held;
  for (int index = 0; index < kCap; ++index) {
    held.push_back(std::make_unique<Client>(server.port()));
    ASSERT_TRUE(held.back()->connected());
  }
  // Accepted in order, so these come after the four held ones: each is refused at once
  // rather than queued behind them.
  for (int extra = 0; extra < 20; ++extra) {
    EXPECT_EQ(get_metrics(server.port()).status, 503) << "connection " << kCap + extra;
  }
  for (const std::unique_ptr<Client>& client : held) {
    ASSERT_TRUE(client->send_all(request_of("GET", "/metrics")));
    EXPECT_EQ(parse_reply(client->read_to_end().value_or("")).status, 200);
  }
  held.clear();
  // Their places free up once the server has seen them close, which may take a turn of its
  // loop after our close() returns: a bounded number of tries, each answered at once.
  int status = 0;
  for (int attempt = 0; attempt < 1000 && status != 200; ++attempt) {
    status = get_metrics(server.port()).status;
  }
  EXPECT_EQ(status, 200);
}

// Issue 39, item 9: 64 idle sockets of one client, reopened as the server closed them, got
// every scrape refused (0 of 40, all 503).
TEST(MetricsServer, OneClientsIdleSocketsDoNotKeepAnotherOut) {
  MetricsServer server = constant_server({.request_timeout = 600s});  // 64, 8 per client
  std::vector<std::unique_ptr<Client>> hog = idle_clients(server.port(), "127.0.0.2", 64);
  for (int scrape = 0; scrape < 40; ++scrape) {
    EXPECT_EQ(get_metrics(server.port(), "127.0.0.3").status, 200) << "scrape " << scrape;
    for (std::unique_ptr<Client>& client : hog) {
      if (client->heard_from_server()) {
        client = std::make_unique<Client>(server.port(), "127.0.0.2");
      }
    }
  }
  // Accepted in order: the first eight hold the client's places (each is served when it asks
  // at last); any further one of that client is refused at once.
  EXPECT_EQ(get_metrics(server.port(), "127.0.0.2").status, 503);
  for (int index = 0; index < 8; ++index) {
    EXPECT_EQ(ask(*hog[static_cast<std::size_t>(index)], request_of("GET", "/metrics")).status, 200)
        << "connection " << index;
  }
}

TEST(MetricsServer, AtTheCapANewClientTakesThePlaceOfAnotherClientsIdleConnection) {
  // One client may fill the cap here; the newcomer still gets in.
  MetricsServer server = constant_server(
      {.max_connections = 4, .max_connections_per_client = 4, .request_timeout = 600s});
  std::vector<std::unique_ptr<Client>> hog = idle_clients(server.port(), "127.0.0.2", 4);
  EXPECT_EQ(get_metrics(server.port(), "127.0.0.2").status, 503);  // its share is full
  // The newcomer's scrape is served; the hog's oldest connection gave its place, with a 503.
  // The newcomer stays connected (answered, not yet closed), so it keeps that place.
  Client newcomer(server.port(), "127.0.0.3");
  EXPECT_EQ(ask(newcomer, request_of("GET", "/metrics")).status, 200);
  EXPECT_EQ(parse_reply(hog[0]->read_to_end().value_or("")).status, 503);
  // The hog, holding the most (3), cannot push another out: refused, its three kept.
  EXPECT_EQ(get_metrics(server.port(), "127.0.0.2").status, 503);
  for (std::size_t index = 1; index < hog.size(); ++index) {
    EXPECT_EQ(ask(*hog[index], request_of("GET", "/metrics")).status, 200) << index;
  }
}

TEST(MetricsServer, AtTheCapIdleConnectionsOfManyAddressesDoNotKeepANewClientOut) {
  // Every address of 127.0.0.0/8 is a local client's to use: four hold one place each.
  MetricsServer server = constant_server({.max_connections = 4, .request_timeout = 600s});
  std::vector<std::unique_ptr<Client>> idle;
  for (const char* source : {"127.0.1.1", "127.0.1.2", "127.0.1.3", "127.0.1.4"}) {
    idle.push_back(std::make_unique<Client>(server.port(), source));
    ASSERT_TRUE(idle.back()->connected());
  }
  Client newcomer(server.port(), "127.0.0.3");
  EXPECT_EQ(ask(newcomer, request_of("GET", "/metrics")).status, 200);
  EXPECT_EQ(parse_reply(idle[0]->read_to_end().value_or("")).status, 503);  // the oldest
  // Every address now holds one: a second connection of one of them takes no one's place.
  EXPECT_EQ(get_metrics(server.port(), "127.0.1.2").status, 503);
  for (std::size_t index = 1; index < idle.size(); ++index) {
    EXPECT_EQ(ask(*idle[index], request_of("GET", "/metrics")).status, 200) << index;
  }
}

TEST(MetricsServer, HeadsOverTheLimitsAre431) {
  MetricsServer server = constant_server();  // at most 8 KiB and 100 header fields
  const std::string request_line = "GET /metrics HTTP/1.1\r\n";
  EXPECT_EQ(ask(server.port(), request_line + numbered_fields(100) + "\r\n").status, 200);
  EXPECT_EQ(ask(server.port(), request_line + numbered_fields(101) + "\r\n").status, 431);
  const std::string long_field = "X-Long: " + std::string(8200, 'y') + "\r\n";
  EXPECT_EQ(ask(server.port(), request_line + long_field + "\r\n").status, 431);
  // 30 MB of tiny header fields: answered 431 after the first 8 KiB; the rest is read and
  // dropped, never kept.
  Client flood(server.port());
  ASSERT_TRUE(flood.send_all(request_line));
  const std::string fields = numbered_fields(1000);
  for (std::size_t sent = 0; sent < 30'000'000 && flood.send_all(fields); sent += fields.size()) {
  }
  EXPECT_EQ(parse_reply(flood.read_to_end().value_or("")).status, 431);
  EXPECT_EQ(get_metrics(server.port()).status, 200);
}

}  // namespace
}  // namespace moestat
