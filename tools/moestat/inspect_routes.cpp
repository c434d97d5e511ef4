// `moestat inspect ROUTES_FILE`: the layout, and per request its positions and how many of
// its rows were recorded.
#include "inspect_routes.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <moestat/printable.hpp>

namespace moestat::cli {
namespace {

// Requests listed in the text summary (the JSON lists every one).
constexpr std::size_t kShownRequests = 10;

std::int64_t valid_rows(const routes::RoutedExperts& request) {
  return std::count_if(request.valid.data.begin(), request.valid.data.end(),
                       [](std::byte flag) { return flag != std::byte{0}; });
}

}  // namespace

void inspect_routes(const std::vector<routes::RoutedExperts>& requests, const std::string& path,
                    bool json, nlohmann::ordered_json& out) {
  const routes::RouteLayout& layout = requests.front().layout;
  std::int64_t tokens = 0;
  std::int64_t rows = 0;
  std::int64_t valid = 0;
  nlohmann::ordered_json listed = nlohmann::ordered_json::array();
  for (const routes::RoutedExperts& request : requests) {
    tokens += request.num_tokens();
    rows += request.num_tokens() * layout.num_columns();
    valid += valid_rows(request);
    listed.push_back({{"request_id", request.request_id},
                      {"first_position", request.first_position},
                      {"num_tokens", request.num_tokens()},
                      {"valid_rows", valid_rows(request)},
                      {"model", request.model},
                      {"placement_version", request.placement_version}});
  }
  out["kind"] = "moestat routes";
  out["num_decoder_layers"] = layout.num_decoder_layers;
  out["moe_layers"] = layout.layers;
  out["num_experts"] = layout.num_experts;
  out["top_k"] = layout.top_k;
  out["id_dtype"] = dtype_name(layout.id_dtype());
  out["bytes_per_token"] = layout.bytes_per_token();
  out["num_requests"] = requests.size();
  out["num_tokens"] = tokens;
  out["valid_rows"] = valid;
  out["rows"] = rows;
  out["requests"] = std::move(listed);
  if (json) return;

  fmt::print("file:        {}\n", printable(path));
  fmt::print("kind:        moestat routes (per-request routed experts, for routing replay)\n");
  fmt::print("layout:      {} MoE layers of {} decoder layers, top-{} of {} experts\n",
             layout.num_columns(), layout.num_decoder_layers, layout.top_k, layout.num_experts);
  fmt::print("ids:         {}, {} bytes per token (ids and a validity byte per layer)\n",
             dtype_name(layout.id_dtype()), layout.bytes_per_token());
  fmt::print("requests:    {} requests, {} tokens\n", requests.size(), tokens);
  fmt::print("recorded:    {} of {} token-layer rows ({:.2f}%)\n", valid, rows,
             rows > 0 ? 100.0 * double(valid) / double(rows) : 100.0);
  fmt::print("  {:<24}  {:>15}  {:>8}  {:>9}\n", "request", "positions", "tokens", "recorded");
  for (std::size_t i = 0; i < std::min(kShownRequests, requests.size()); ++i) {
    const routes::RoutedExperts& request = requests[i];
    const std::int64_t request_rows = request.num_tokens() * layout.num_columns();
    fmt::print(
        "  {:<24}  {:>15}  {:>8}  {:>8.2f}%\n", printable(request.request_id),
        fmt::format("{}..{}", request.first_position,
                    request.first_position + request.num_tokens()),
        request.num_tokens(),
        request_rows > 0 ? 100.0 * double(valid_rows(request)) / double(request_rows) : 100.0);
  }
  if (requests.size() > kShownRequests) {
    fmt::print("  ({} more requests; --json lists every one)\n", requests.size() - kShownRequests);
  }
}

}  // namespace moestat::cli
