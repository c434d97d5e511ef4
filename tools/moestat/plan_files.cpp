#include "plan_files.hpp"

#include <moestat/error.hpp>
#include <moestat/io/json.hpp>
#include <nlohmann/json.hpp>

namespace moestat::cli {
namespace {

/// torch .pt files are read and written by the io module of another branch; until it is
/// merged, they are refused here with a clear message.
void refuse_torch_files(const std::filesystem::path& path) {
  MOESTAT_CHECK(path.extension() != ".pt",
                "{}: .pt files are not supported in this build; use a .json file", path.string());
}

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
  refuse_torch_files(path);
  return naming_path(path, [&] { return plan::load_window_from_json(io::read_text_file(path)); });
}

Placement read_placement_file(const std::filesystem::path& path, std::int64_t num_logical_experts) {
  refuse_torch_files(path);
  return naming_path(
      path, [&] { return io::placement_from_json(io::read_text_file(path), num_logical_experts); });
}

void write_placement_file(const std::filesystem::path& path, const Placement& placement) {
  refuse_torch_files(path);
  io::write_file_atomically(path, io::placement_to_json(placement));
}

void write_mask_file(const std::filesystem::path& path, const plan::HotExpertMask& mask) {
  refuse_torch_files(path);
  nlohmann::json rows = nlohmann::json::array();
  for (std::int64_t l = 0; l < mask.num_layers; ++l) {
    std::vector<bool> row;
    for (std::int64_t e = 0; e < mask.num_experts; ++e) {
      row.push_back(mask.on_gpu[std::size_t(l * mask.num_experts + e)] != 0);
    }
    rows.push_back(row);
  }
  io::write_file_atomically(path, nlohmann::json{{"gpu_experts_mask", rows}}.dump() + "\n");
}

}  // namespace moestat::cli
