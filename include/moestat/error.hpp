// The one error type of moestat and the macros that throw it.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace moestat {

/// Every failure moestat reports: bad input, a broken invariant, a failed system call.
/// `what()` reads "file:line: message" so a log line points at the check that fired.
class Error : public std::runtime_error {
 public:
  Error(const char* file, int line, const std::string& message)
      : std::runtime_error(fmt::format("{}:{}: {}", file, line, message)), message_(message) {}

  /// The message without the source location, for user-facing output such as the CLI.
  const std::string& message() const noexcept { return message_; }

 private:
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
