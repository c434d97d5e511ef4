// Reading the report's SVG in tests: the chart documents of a page and the text of an
// element found by its class.
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

}  // namespace moestat::test
