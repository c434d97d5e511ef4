// What `moestat inspect` says of a routes file (per-request routed experts).
#pragma once

#include <moestat/routes/routed_experts.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace moestat::cli {

/// Fills `out` with the file's layout and requests; prints the text summary unless `json`.
void inspect_routes(const std::vector<routes::RoutedExperts>& requests, const std::string& path,
                    bool json, nlohmann::ordered_json& out);

}  // namespace moestat::cli
