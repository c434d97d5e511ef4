// RequestHead and the answers of the metrics endpoint.
#include "http_exchange.hpp"

#include <fmt/format.h>

#include <exception>
#include <moestat/online/prometheus.hpp>

namespace moestat::online::detail {
namespace {

std::string_view reason_phrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "";
  }
}

struct Reply {
  int status = 200;
  std::string_view content_type{};  // no Content-Type header when empty
  std::string_view body{};
  bool send_body = true;             // HEAD: the headers of GET's answer only
  std::string_view extra_headers{};  // each ending in CRLF
};

std::string format_reply(const Reply& reply) {
  std::string text = fmt::format("HTTP/1.1 {} {}\r\n", reply.status, reason_phrase(reply.status));
  if (!reply.content_type.empty()) text += fmt::format("Content-Type: {}\r\n", reply.content_type);
  text += fmt::format("Content-Length: {}\r\nConnection: close\r\n{}\r\n", reply.body.size(),
                      reply.extra_headers);
  if (reply.send_body) text += reply.body;
  return text;
}

}  // namespace

RequestHead::State RequestHead::append(std::string_view received) {
  const std::size_t scanned = bytes_.size();
  bytes_.append(received);
  for (std::size_t end = bytes_.find('\n', scanned); end != std::string::npos;
       end = bytes_.find('\n', line_start_)) {
    std::size_t line_size = end - line_start_;
    if (line_size > 0 && bytes_[end - 1] == '\r') --line_size;
    line_start_ = end + 1;
    if (line_size == 0) {  // the blank line that ends the head
      complete_ = line_start_ <= max_bytes_;
      return complete_ ? State::complete : State::too_large;
    }
    if (num_lines_ == 0) request_line_size_ = line_size;
    if (++num_lines_ > max_fields_ + 1) return State::too_large;
  }
  return bytes_.size() > max_bytes_ ? State::too_large : State::incomplete;
}

std::string_view RequestHead::request_line() const noexcept {
  return complete_ ? std::string_view(bytes_).substr(0, request_line_size_) : std::string_view();
}

std::string answer_request(std::string_view request_line,
                           const std::function<std::string()>& text) {
  // METHOD SP target SP HTTP-version
  const std::size_t method_end = request_line.find(' ');
  const std::size_t target_end = request_line.rfind(' ');
  if (method_end == std::string_view::npos || method_end == target_end) return bare_answer(400);
  const std::string_view method = request_line.substr(0, method_end);
  const std::string_view target = request_line.substr(method_end + 1, target_end - method_end - 1);
  const std::string_view version = request_line.substr(target_end + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return bare_answer(400);
  if (method != "GET" && method != "HEAD") {
    return format_reply({.status = 405, .extra_headers = "Allow: GET, HEAD\r\n"});
  }
  const bool send_body = method == "GET";
  if (target.substr(0, target.find('?')) != "/metrics") {
    return format_reply({.status = 404, .send_body = send_body});
  }
  try {
    const std::string metrics = text();
    return format_reply(
        {.content_type = kPrometheusContentType, .body = metrics, .send_body = send_body});
  } catch (const std::exception& failure) {
    return format_reply({.status = 500,
                         .content_type = "text/plain; charset=utf-8",
                         .body = failure.what(),
                         .send_body = send_body});
  }
}

std::string bare_answer(int status) { return format_reply({.status = status}); }

}  // namespace moestat::online::detail
