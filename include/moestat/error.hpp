// The one error type of moestat and the macros that throw it.
#pragma once

#include <fmt/format.h>

#include <moestat/printable.hpp>
#include <stdexcept>
#include <string>
#include <utility>

namespace moestat {

/// Every failure moestat reports: bad input, a broken invariant, a failed system call.
/// `what()` reads "file:line: message" so a log line points at the check that fired.
class Error : public std::runtime_error {
 public:
  /// `message` is kept escaped (moestat::printable): messages quote bytes of the files
  /// they are about, which must not reach a terminal or a log raw.
  Error(const char* file, int line, const std::string& message)
      : Error(file, line, printable(message), kEscaped) {}

  /// The message without the source location, for user-facing output such as the CLI.
  const std::string& message() const noexcept { return message_; }

  /// This error with `prefix` (escaped as the message is) put before its message:
  /// "prefix: message", still pointing at the check that fired, not at the caller that added
  /// what it knew (a path, a field).
  Error with_context(const std::string& prefix) const {
    return Error(file_, line_, fmt::format("{}: {}", printable(prefix), message_), kEscaped);
  }

 private:
  struct Escaped {};
  static constexpr Escaped kEscaped{};
  Error(const char* file, int line, std::string escaped, Escaped)
      : std::runtime_error(fmt::format("{}:{}: {}", file, line, escaped)),
        file_(file),
        line_(line),
        message_(std::move(escaped)) {}

  const char* file_;  ///< __FILE__ of the check: a string literal, alive for the program.
  int line_;
  std::string message_;
};

namespace detail {
[[noreturn]] inline void throw_error(const char* file, int line, const std::string& message) {
  throw Error(file, line, message);
}
}  // namespace detail

}  // namespace moestat

/// Throws moestat::Error with a fmt-formatted message when `cond` is false.
#define MOESTAT_CHECK(cond, ...)                                                      \
  do {                                                                                \
    if (!(cond)) [[unlikely]] {                                                       \
      ::moestat::detail::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
    }                                                                                 \
  } while (false)

/// Throws moestat::Error unconditionally.
#define MOESTAT_FAIL(...) \
  ::moestat::detail::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
