// Internal: the start of every HTML page of the report (its head, one style sheet, the
// heading), so that the recording's page and the simulation's look alike.
#pragma once

#include <string>
#include <string_view>

namespace moestat::report::detail {

/// Appends the doctype, the head (title and style) and `<body>` with `heading` as `<h1>`;
/// `heading` is escaped here.
void open_page(std::string& out, std::string_view heading);

}  // namespace moestat::report::detail
