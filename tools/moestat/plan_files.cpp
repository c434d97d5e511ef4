#include "plan_files.hpp"

#include <moestat/error.hpp>
#include <moestat/io/statistics.hpp>

namespace moestat::cli {

Placement read_placement_file(const std::filesystem::path& path, std::int64_t num_logical_experts) {
  try {
    return io::read_placement(path, num_logical_experts);
  } catch (const Error& error) {
    if (error.message().starts_with(printable(path.string()))) throw;
    throw error.with_context(path.string());
  }
}

void write_placement_file(const std::filesystem::path& path, const Placement& placement) {
  io::write_placement(path, placement);
}

void write_mask_file(const std::filesystem::path& path, const ExpertMask& mask) {
  io::write_expert_mask(path, mask);
}

}  // namespace moestat::cli
