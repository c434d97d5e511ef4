// The routes file: one or more requests' RoutedExperts of one model in a safetensors
// container, self-describing (docs/formats.md, "Routes files").
//
//   metadata "format": "moestat.routes", "version": "1",
//            "layout": {"num_decoder_layers", "layers", "num_experts", "top_k"},
//            "requests": [{"request_id", "first_position", "num_tokens", "model",
//                          "placement_version"}, ...]
//   ids:   [total tokens, num MoE layers, top_k] uint8 / uint16 / int32 logical expert ids
//   valid: [total tokens, num MoE layers] bool
// The requests' rows follow each other in the order of "requests".
#pragma once

#include <cstddef>
#include <filesystem>
#include <moestat/io/named_tensors.hpp>
#include <moestat/routes/routed_experts.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace moestat::routes {

inline constexpr std::string_view kRoutesFormat = "moestat.routes";

/// The named tensors of a routes file. moestat::Error for no requests, requests of different
/// layouts, or routes that do not validate.
io::NamedTensors routes_to_tensors(std::span<const RoutedExperts> routes);
/// The requests of a routes file's named tensors; moestat::Error naming the first problem.
std::vector<RoutedExperts> routes_from_tensors(const io::NamedTensors& tensors);
/// Whether `tensors` say they are a routes file (their "format" metadata).
bool is_routes_file(const io::NamedTensors& tensors) noexcept;

/// Writes atomically (a temporary file, then rename).
void write_routes_file(const std::filesystem::path& path, std::span<const RoutedExperts> routes);
std::vector<RoutedExperts> read_routes_file(const std::filesystem::path& path);
/// A routes file already in memory; `name` goes into error messages.
std::vector<RoutedExperts> read_routes(std::span<const std::byte> bytes,
                                       std::string_view name = "<memory>");

}  // namespace moestat::routes
