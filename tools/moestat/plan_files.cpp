#include "plan_files.hpp"

#include <moestat/error.hpp>
#include <moestat/io/json.hpp>
#include <moestat/io/statistics.hpp>

namespace moestat::cli {
namespace {

/// Runs `body`, prefixing any moestat::Error with the path (unless it already names it).
template <typename Body>
auto naming_path(const std::filesystem::path& path, Body&& body) {
  try {
    return body();
  } catch (const Error& error) {
    if (error.message().starts_with(path.string())) throw;
    MOESTAT_FAIL("{}: {}", path.string(), error.message());
  }
}

}  // namespace

plan::LoadWindow read_load_file(const std::filesystem::path& path) {
  // JSON through the planners' own reader, which also takes fiddler's expert_popularity;
  // .pt and .safetensors through the io module.
  if (io::detect_file_format(path) != io::FileFormat::kJson) {
    const io::LogicalCounts counts = io::read_logical_counts(path);
    return plan::split_window(counts.num_layers, counts.num_experts,
                              std::span<const std::int64_t>(counts.counts), counts.has_window_axis);
  }
  return naming_path(path, [&] { return plan::load_window_from_json(io::read_text_file(path)); });
}

Placement read_placement_file(const std::filesystem::path& path, std::int64_t num_logical_experts) {
  return naming_path(path, [&] { return io::read_placement(path, num_logical_experts); });
}

void write_placement_file(const std::filesystem::path& path, const Placement& placement) {
  io::write_placement(path, placement);
}

void write_mask_file(const std::filesystem::path& path, const plan::HotExpertMask& mask) {
  io::write_expert_mask(path, io::ExpertMask{mask.num_layers, mask.num_experts, mask.on_gpu});
}

}  // namespace moestat::cli
