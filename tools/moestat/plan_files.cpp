#include "plan_files.hpp"

#include <moestat/error.hpp>
#include <moestat/io/statistics.hpp>

namespace moestat::cli {

namespace {

/// io::read_placement, its errors naming the path.
Placement read_named(const std::filesystem::path& path, std::int64_t num_logical_experts) {
  try {
    return io::read_placement(path, num_logical_experts);
  } catch (const Error& error) {
    if (error.message().starts_with(printable(path.string()))) throw;
    throw error.with_context(path.string());
  }
}

}  // namespace

Placement read_placement_file(const std::filesystem::path& path, const ModelShape& model) {
  // Read first for its own shape (experts: its highest id + 1, as every expert has a slot),
  // so another model's placement is said to be one, not taken for a map that fails to fit.
  Placement own = read_named(path, 0);
  MOESTAT_CHECK(
      own.num_layers() == model.num_layers && own.num_logical_experts() == model.num_experts,
      "{}: shapes differ: the placement has {} layers x {} slots for {} experts "
      "(ids 0 to {}); {} has {} layers x {} experts",
      path.string(), own.num_layers(), own.num_physical_experts(), own.num_logical_experts(),
      own.num_logical_experts() - 1, model.loads_file, model.num_layers, model.num_experts);
  return own;
}

void write_placement_file(const std::filesystem::path& path, const Placement& placement) {
  io::write_placement(path, placement);
}

void write_mask_file(const std::filesystem::path& path, const ExpertMask& mask) {
  io::write_expert_mask(path, mask);
}

}  // namespace moestat::cli
