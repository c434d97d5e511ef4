// Reading the report's text in tests: the chart documents of a page, the text of an element
// found by its class, how often a piece of markup occurs.
#pragma once

#include <string>
#include <vector>

namespace moestat::test {

/// The `<svg ...>...</svg>` documents in `text` (a page, or a DOM a browser printed) whose
/// class is "chart".
inline std::vector<std::string> charts_in(const std::string& text) {
  std::vector<std::string> out;
  for (std::size_t at = text.find("<svg "); at != std::string::npos;
       at = text.find("<svg ", at + 1)) {
    const std::string svg = text.substr(at, text.find("</svg>", at) + 6 - at);
    if (svg.substr(0, svg.find('>')).find("class=\"chart\"") != std::string::npos) {
      out.push_back(svg);
    }
  }
  return out;
}

/// The text of the first element of class `name` in `svg` ("" when there is none).
inline std::string text_of(const std::string& svg, const std::string& name) {
  const std::size_t at = svg.find("class=\"" + name + "\"");
  if (at == std::string::npos) return "";
  const std::size_t begin = svg.find('>', at) + 1;
  return svg.substr(begin, svg.find('<', begin) - begin);
}

/// How many times `needle` occurs in `text` (overlapping occurrences counted).
inline std::size_t occurrences(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

}  // namespace moestat::test
