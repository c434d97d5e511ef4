// Progress of a command that runs for more than a moment, on a terminal only.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

namespace moestat::cli {

/// "[#####     ] pass 12/64" on stdout when it is a terminal, redrawn in place; nothing in
/// logs or pipes, so output that is parsed or compared never holds it.
class ProgressBar {
 public:
  ProgressBar(std::int64_t total, std::string unit)
      : total_(total), unit_(std::move(unit)), shown_(::isatty(STDOUT_FILENO) == 1) {}
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  ~ProgressBar() { finish(); }

  /// `done` of the total finished; `doing` names the step under way.
  void update(std::int64_t done, std::string_view doing = "") {
    if (!shown_) return;
    constexpr std::int64_t kWidth = 30;
    const std::int64_t filled = total_ > 0 ? done * kWidth / total_ : kWidth;
    const std::string line =
        fmt::format("[{}{}] {} {}/{}{}{}", std::string(std::size_t(filled), '#'),
                    std::string(std::size_t(kWidth - filled), ' '), unit_, done, total_,
                    doing.empty() ? "" : " ", doing);
    fmt::print("\r{:<{}}", line, width_);
    width_ = std::max(width_, line.size());
    std::fflush(stdout);
  }

  /// Clears the bar, so the next line starts clean (the destructor does too).
  void finish() {
    if (!shown_ || width_ == 0) return;
    fmt::print("\r{}\r", std::string(width_, ' '));
    std::fflush(stdout);
    width_ = 0;
  }

 private:
  std::int64_t total_;
  std::string unit_;
  bool shown_;
  std::size_t width_ = 0;  ///< The longest line drawn, which a shorter one must cover.
};

}  // namespace moestat::cli
