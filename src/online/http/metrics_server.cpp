// MetricsServer: one thread polls the listening socket and every open connection at once
// (non-blocking POSIX sockets), so no client can hold up another. Hand-written rather than
// over cpp-httplib 0.11 (Debian's), whose read timeout restarts with every byte received and
// whose accepted connections wait in an unbounded queue for its worker: one client sending a
// header byte every 3 s held every scrape up for 46 s, and 1,100 idle connections took the
// engine's last file descriptors.
//
// The connection cap is shared fairly among client addresses: one address holds at most
// max_connections_per_client, and at the cap a newcomer takes the place of an idle connection
// of an address holding more than it does. Else 64 idle sockets of one client, reopened as
// the server closed them, got every scrape refused (issue 39, item 9).
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <moestat/error.hpp>
#include <moestat/online/metrics_server.hpp>
#include <moestat/online/prometheus.hpp>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "http_exchange.hpp"

namespace moestat::online {
namespace {

using Clock = std::chrono::steady_clock;

// Reads and accepts per wake-up are bounded, so a client that sends (or connects) as fast as
// the loop takes cannot keep it from the others.
constexpr std::size_t kChunkBytes = 4096;
constexpr int kChunksPerTurn = 16;
constexpr int kAcceptsPerTurn = 64;
// How long accepting pauses when the process is out of descriptors: the pending connections
// wait in the kernel's queue instead of waking the loop again at once.
constexpr std::chrono::milliseconds kAcceptPause{100};

/// Owns a file descriptor and closes it when dropped.
class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(int fd) noexcept : fd_(fd) {}
  Descriptor(Descriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Descriptor& operator=(Descriptor&& other) noexcept {
    if (this != &other) {
      close();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~Descriptor() { close(); }

  int get() const noexcept { return fd_; }
  void close() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

bool would_block(int error) { return error == EAGAIN || error == EWOULDBLOCK; }

/// A client's address without its port: what the per-client limit counts.
struct PeerAddress {
  sa_family_t family = AF_UNSPEC;
  std::array<std::uint8_t, 16> bytes{};  // the IPv4 address in the first 4
  auto operator<=>(const PeerAddress&) const = default;
};

PeerAddress peer_address_of(const sockaddr_storage& address) {
  PeerAddress peer{.family = address.ss_family};
  if (address.ss_family == AF_INET) {
    std::memcpy(peer.bytes.data(), &reinterpret_cast<const sockaddr_in&>(address).sin_addr, 4);
  } else if (address.ss_family == AF_INET6) {
    std::memcpy(peer.bytes.data(), &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr, 16);
  }
  return peer;
}

/// Answers 503 and leaves the close to the caller. Best effort: a client whose socket is full
/// gets the close alone.
void refuse(const Descriptor& client) {
  const std::string refusal = detail::bare_answer(503);
  [[maybe_unused]] const ssize_t sent =
      send(client.get(), refusal.data(), refusal.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

struct Connection {
  enum class Phase {
    reading,   // the request's head
    writing,   // the answer, from `sent`
    draining,  // answered and half-closed: reads what the client still sends until it closes,
               // since closing with unread bytes would reset the connection and lose the answer
    closed,
  };

  Descriptor socket;
  PeerAddress peer;
  Clock::time_point deadline;
  detail::RequestHead head;
  std::string answer{};
  std::size_t sent = 0;
  Phase phase = Phase::reading;
};

void drain(Connection& connection) {
  char chunk[kChunkBytes];
  for (int turn = 0; turn < kChunksPerTurn; ++turn) {
    const ssize_t received = recv(connection.socket.get(), chunk, sizeof(chunk), 0);
    if (received > 0 || (received < 0 && errno == EINTR)) continue;
    if (received < 0 && would_block(errno)) return;
    connection.phase = Connection::Phase::closed;  // the client closed, or the socket failed
    return;
  }
}

void write_answer(Connection& connection) {
  while (connection.sent < connection.answer.size()) {
    const ssize_t sent = send(connection.socket.get(), connection.answer.data() + connection.sent,
                              connection.answer.size() - connection.sent, MSG_NOSIGNAL);
    if (sent >= 0) {
      connection.sent += static_cast<std::size_t>(sent);
    } else if (would_block(errno)) {
      return;
    } else if (errno != EINTR) {
      connection.phase = Connection::Phase::closed;
      return;
    }
  }
  std::string().swap(connection.answer);
  shutdown(connection.socket.get(), SHUT_WR);
  connection.phase = Connection::Phase::draining;
  drain(connection);
}

void start_answer(Connection& connection, std::string answer) {
  connection.answer = std::move(answer);
  connection.phase = Connection::Phase::writing;
  write_answer(connection);
}

void read_request(Connection& connection, const std::function<std::string()>& text) {
  char chunk[kChunkBytes];
  for (int turn = 0; turn < kChunksPerTurn; ++turn) {
    const std::size_t wanted = std::min(sizeof(chunk), connection.head.room());
    const ssize_t received = recv(connection.socket.get(), chunk, wanted, 0);
    if (received < 0 && errno == EINTR) continue;
    if (received < 0 && would_block(errno)) return;
    if (received <= 0) {  // the client left before asking, or the socket failed
      connection.phase = Connection::Phase::closed;
      return;
    }
    using State = detail::RequestHead::State;
    switch (connection.head.append({chunk, static_cast<std::size_t>(received)})) {
      case State::incomplete:
        continue;
      case State::complete:
        start_answer(connection, detail::answer_request(connection.head.request_line(), text));
        return;
      case State::too_large:
        start_answer(connection, detail::bare_answer(431));
        return;
    }
  }
}

/// Moves the connection on as far as its socket allows without waiting.
void advance(Connection& connection, const std::function<std::string()>& text) {
  try {
    switch (connection.phase) {
      case Connection::Phase::reading:
        read_request(connection, text);
        break;
      case Connection::Phase::writing:
        write_answer(connection);
        break;
      case Connection::Phase::draining:
        drain(connection);
        break;
      case Connection::Phase::closed:
        break;
    }
  } catch (const std::exception&) {
    // Out of memory for this answer: drop the connection, keep serving the others.
    connection.phase = Connection::Phase::closed;
  }
}

/// The open connections, oldest first, and how many each client address holds.
class ConnectionTable {
 public:
  std::size_t size() const noexcept { return connections_.size(); }
  std::span<Connection> all() noexcept { return connections_; }

  int held_by(const PeerAddress& peer) const {
    const auto found = held_.find(peer);
    return found == held_.end() ? 0 : found->second;
  }

  void add(Connection connection) {
    ++held_[connection.peer];
    connections_.push_back(std::move(connection));
  }

  /// Drops the closed connections and those past their deadline.
  void remove_finished(Clock::time_point now) {
    std::erase_if(connections_, [&](const Connection& connection) {
      const bool finished =
          connection.phase == Connection::Phase::closed || connection.deadline <= now;
      if (finished) release(connection.peer);
      return finished;
    });
  }

  /// Makes a place for a client holding `held` connections: closes the oldest idle connection
  /// (still waiting for its request, or answered and waiting for the client's close) among
  /// those of the addresses holding the most, if they hold more than `held`. False when none
  /// may go. An answer being sent is never cut.
  bool displace_for(int held) {
    auto chosen = connections_.end();
    int most = held;
    for (auto connection = connections_.begin(); connection != connections_.end(); ++connection) {
      const bool idle = connection->phase == Connection::Phase::reading ||
                        connection->phase == Connection::Phase::draining;
      const int count = held_by(connection->peer);
      if (idle && count > most) {
        chosen = connection;
        most = count;
      }
    }
    if (chosen == connections_.end()) return false;
    if (chosen->phase == Connection::Phase::reading) refuse(chosen->socket);
    release(chosen->peer);
    connections_.erase(chosen);
    return true;
  }

 private:
  void release(const PeerAddress& peer) {
    const auto found = held_.find(peer);
    if (--found->second == 0) held_.erase(found);
  }

  std::vector<Connection> connections_;
  std::map<PeerAddress, int> held_;
};

Descriptor listen_on(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int resolved = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  MOESTAT_CHECK(resolved == 0, "metrics server: cannot listen on {}:{} ({})", host, port,
                gai_strerror(resolved));
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, freeaddrinfo);
  int failure = 0;
  for (const addrinfo* address = found; address != nullptr; address = address->ai_next) {
    // CLOEXEC: engines fork workers, which must not inherit the endpoint's sockets.
    Descriptor listener(socket(address->ai_family,
                               address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                               address->ai_protocol));
    // SO_REUSEADDR reuses a port left in TIME_WAIT; SO_REUSEPORT, left off, would let a
    // second server share a port in use.
    const int yes = 1;
    if (listener.get() >= 0 &&
        setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes)) == 0 &&
        bind(listener.get(), address->ai_addr, address->ai_addrlen) == 0 &&
        listen(listener.get(), SOMAXCONN) == 0) {
      return listener;
    }
    failure = errno;
  }
  MOESTAT_FAIL("metrics server: cannot listen on {}:{} ({})", host, port, std::strerror(failure));
}

int bound_port(const Descriptor& listener) {
  sockaddr_storage address{};
  socklen_t size = sizeof(address);
  MOESTAT_CHECK(getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &size) == 0,
                "metrics server: cannot read the port listened on ({})", std::strerror(errno));
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}

}  // namespace

struct MetricsServer::Impl {
  std::function<std::string()> text;
  MetricsServerOptions options;
  Descriptor listener;
  Descriptor wake;  // an eventfd: stop() writes it to end the loop
  int port = 0;
  std::thread thread;

  void serve();
  /// Accepts what is pending: up to the caps (see the top of this file), then answers 503 and
  /// closes.
  void accept_pending(ConnectionTable& connections, Clock::time_point& paused_until);
  /// Whether a client at `peer` may have one more connection, making a place for it if needed.
  bool admit(ConnectionTable& connections, const PeerAddress& peer) const;
};

bool MetricsServer::Impl::admit(ConnectionTable& connections, const PeerAddress& peer) const {
  const int held = connections.held_by(peer);
  if (held >= options.max_connections_per_client) return false;
  return connections.size() < static_cast<std::size_t>(options.max_connections) ||
         connections.displace_for(held);
}

void MetricsServer::Impl::accept_pending(ConnectionTable& connections,
                                         Clock::time_point& paused_until) {
  for (int turn = 0; turn < kAcceptsPerTurn; ++turn) {
    sockaddr_storage address{};
    socklen_t address_size = sizeof(address);
    Descriptor client(accept4(listener.get(), reinterpret_cast<sockaddr*>(&address), &address_size,
                              SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (client.get() < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        paused_until = Clock::now() + kAcceptPause;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // none pending (or a failure the next wake-up retries)
    }
    const PeerAddress peer = peer_address_of(address);
    if (!admit(connections, peer)) {
      refuse(client);
      continue;
    }
    connections.add(
        {.socket = std::move(client),
         .peer = peer,
         .deadline = Clock::now() + options.request_timeout,
         .head = detail::RequestHead(options.max_header_bytes, options.max_header_count)});
  }
}

void MetricsServer::Impl::serve() {
  ConnectionTable connections;
  std::vector<pollfd> polled;
  Clock::time_point accept_paused_until;
  while (true) {
    const bool accepting = Clock::now() >= accept_paused_until;
    Clock::time_point wake_at = accepting ? Clock::time_point::max() : accept_paused_until;
    polled.clear();
    polled.push_back({.fd = wake.get(), .events = POLLIN, .revents = 0});
    // A negative descriptor is skipped by poll().
    polled.push_back({.fd = accepting ? listener.get() : -1, .events = POLLIN, .revents = 0});
    for (const Connection& connection : connections.all()) {
      const bool writing = connection.phase == Connection::Phase::writing;
      polled.push_back({.fd = connection.socket.get(),
                        .events = static_cast<short>(writing ? POLLOUT : POLLIN),
                        .revents = 0});
      wake_at = std::min(wake_at, connection.deadline);
    }
    int timeout_ms = -1;
    if (wake_at != Clock::time_point::max()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(wake_at - Clock::now());
      timeout_ms = static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 60'000));
    }
    // poll() fails only for want of kernel memory: the endpoint ends rather than spin.
    if (poll(polled.data(), polled.size(), timeout_ms) < 0 && errno != EINTR) return;
    if (polled[0].revents != 0) return;  // stop()

    for (std::size_t index = 0; index < connections.size(); ++index) {
      if (polled[index + 2].revents != 0) advance(connections.all()[index], text);
    }
    // Past its deadline a connection closes whatever it was doing: a client that trickles
    // its request, or reads the answer slowly, cannot keep its place longer.
    connections.remove_finished(Clock::now());
    if (polled[1].revents != 0) accept_pending(connections, accept_paused_until);
  }
}

MetricsServer::MetricsServer(std::function<std::string()> text, MetricsServerOptions options)
    : impl_(std::make_unique<Impl>()) {
  MOESTAT_CHECK(options.port >= 0 && options.port <= 65535,
                "metrics server: port {} is not a TCP port (0 to 65535)", options.port);
  MOESTAT_CHECK(options.max_connections > 0, "metrics server: max_connections {} is not positive",
                options.max_connections);
  MOESTAT_CHECK(options.max_connections_per_client > 0,
                "metrics server: max_connections_per_client {} is not positive",
                options.max_connections_per_client);
  MOESTAT_CHECK(options.request_timeout.count() > 0,
                "metrics server: request_timeout {} ms is not positive",
                options.request_timeout.count());
  // A bound far beyond any use, so that accept time plus timeout cannot overflow the clock.
  MOESTAT_CHECK(options.request_timeout <= std::chrono::hours(24 * 365),
                "metrics server: request_timeout {} ms is over a year",
                options.request_timeout.count());
  MOESTAT_CHECK(options.max_header_bytes > 0, "metrics server: max_header_bytes is 0");
  impl_->text = std::move(text);
  impl_->listener = listen_on(options.host, options.port);
  impl_->port = bound_port(impl_->listener);
  impl_->wake = Descriptor(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  MOESTAT_CHECK(impl_->wake.get() >= 0, "metrics server: cannot make its stop signal ({})",
                std::strerror(errno));
  impl_->options = std::move(options);
  impl_->thread = std::thread([impl = impl_.get()] { impl->serve(); });
}

MetricsServer::MetricsServer(LiveMetrics& metrics, MetricsServerOptions options)
    : MetricsServer([&metrics] { return prometheus_text(metrics.update()); }, std::move(options)) {}

MetricsServer::~MetricsServer() { stop(); }

int MetricsServer::port() const noexcept { return impl_->port; }

const std::string& MetricsServer::host() const noexcept { return impl_->options.host; }

void MetricsServer::stop() {
  if (!impl_->thread.joinable()) return;
  const std::uint64_t one = 1;
  // Cannot fail: the eventfd's counter is far from its maximum.
  [[maybe_unused]] const ssize_t written = write(impl_->wake.get(), &one, sizeof(one));
  impl_->thread.join();
  impl_->listener.close();  // new connections are refused from now on
}

}  // namespace moestat::online
