// The HTTP side of the metrics endpoint, apart from its sockets: where a request's head ends
// (within the configured limits) and the whole answer to it. One request per connection.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace moestat::online::detail {

/// Collects a request's head (request line and header fields, up to the blank line) as its
/// bytes arrive, keeping at most `max_bytes + 1` of them.
class RequestHead {
 public:
  enum class State { incomplete, complete, too_large };

  RequestHead(std::size_t max_bytes, std::size_t max_fields) noexcept
      : max_bytes_(max_bytes), max_fields_(max_fields) {}

  /// Bytes the next read may bring: one past the limit, so that a head over it shows.
  std::size_t room() const noexcept { return max_bytes_ + 1 - bytes_.size(); }
  /// Appends `received` (at most room() bytes). Lines end in CRLF or a bare LF.
  State append(std::string_view received);
  /// The request line (without its line end); empty until append() said complete.
  std::string_view request_line() const noexcept;

 private:
  std::size_t max_bytes_;
  std::size_t max_fields_;
  std::string bytes_;
  std::size_t line_start_ = 0;  // where the line not yet ended starts in bytes_
  std::size_t num_lines_ = 0;   // lines ended so far, the request line included
  std::size_t request_line_size_ = 0;
  bool complete_ = false;
};

/// The whole answer (status line, headers, body) to `request_line`: GET or HEAD /metrics is
/// 200 with `text()` (a 500 with the message if it throws), another path 404, another method
/// 405, a malformed line 400. Every answer says `Connection: close`.
std::string answer_request(std::string_view request_line, const std::function<std::string()>& text);

/// An answer with no body: 431 for a head over the limits, 503 beyond the connection cap.
std::string bare_answer(int status);

}  // namespace moestat::online::detail
