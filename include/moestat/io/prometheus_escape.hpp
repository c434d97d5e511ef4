// Escaping for the Prometheus text exposition format 0.0.4, shared by its two writers (live
// metrics, online/prometheus.hpp, and the recording's report, report.hpp), so a label value
// or HELP text is written one way whichever writes it.
#pragma once

#include <string>
#include <string_view>

namespace moestat::io {

namespace detail {

/// Backslash as `\\` and line feed as `\n`; a double quote as `\"` when `quote` (label
/// values, between the format's double quotes). Every other byte, UTF-8 included, as it is.
inline std::string prometheus_escape(std::string_view text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace detail

/// `value` as a label value between the format's double quotes: backslash as `\\`, double
/// quote as `\"`, line feed as `\n` (the three escapes the format has).
inline std::string prometheus_label_value(std::string_view value) {
  return detail::prometheus_escape(value, true);
}

/// `text` as a HELP line's docstring: backslash as `\\` and line feed as `\n` (the format
/// leaves double quotes there as they are).
inline std::string prometheus_help_text(std::string_view text) {
  return detail::prometheus_escape(text, false);
}

}  // namespace moestat::io
