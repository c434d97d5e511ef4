// The head and style sheet the report's HTML pages share: inline CSS, no script, no network.
#include "page.hpp"

#include <fmt/format.h>

#include <iterator>

#include "chart.hpp"

namespace moestat::report::detail {
namespace {

constexpr std::string_view kStyle = R"(<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1200px; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
table { border-collapse: collapse; } th, td { padding: 2px 10px; text-align: left; }
table.meta th { color: #555; font-weight: normal; }
table.hot td:nth-child(-n+3), table.placements td:nth-child(n+2),
table.policies td:nth-child(n+3) {
  text-align: right; font-variant-numeric: tabular-nums; }
table.hot tr:nth-child(even), table.placements tr:nth-child(even),
table.policies tr:nth-child(even) { background: #f4f4f4; }
#summary { background: #f6f8fb; border-left: 4px solid #0072b2; padding: 4px 16px; }
figure { margin: 24px 0; } figcaption { color: #555; max-width: 840px; }
.note { font-size: 12px; color: #555; }
</style>
)";

}  // namespace

void open_page(std::string& out, std::string_view heading) {
  fmt::format_to(std::back_inserter(out),
                 "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                 "<title>{0}</title>\n{1}</head>\n<body>\n<h1>{0}</h1>\n",
                 xml_escape(heading), kStyle);
}

}  // namespace moestat::report::detail
