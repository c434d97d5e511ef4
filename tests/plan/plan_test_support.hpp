// Helpers shared by the plan tests: the real DeepSeek-V3 statistics and the golden outputs
// of the reference EPLB, read from ../shared (tests skip where it is absent).
#pragma once

#include <filesystem>
#include <fstream>
#include <moestat/io/statistics.hpp>
#include <moestat/plan/loads.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace moestat::test {

inline std::filesystem::path shared_dir() { return MOESTAT_SHARED_DIR; }

inline std::filesystem::path deepseek_stats_dir() {
  return shared_dir() / "data" / "deepseek-v3-sglang-stats";
}

/// The six files of real DeepSeek-V3 statistics, in a fixed order.
inline std::vector<std::string> deepseek_stats_files() {
  return {"prefill_in512.json",        "prefill_in1024.json",      "prefill_in2048.json",
          "decode_in1000out1000.json", "decode_in2000out100.json", "prefill_in1800out100.json"};
}

inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// [L, E] loads of one statistics file (all 61 rows, dense ones included).
inline plan::ExpertLoads read_deepseek_stats(const std::string& name) {
  return plan::loads_of(io::read_counts(deepseek_stats_dir() / name, io::Fractions::kKeep));
}

/// Rows `rows` of `loads`.
inline plan::ExpertLoads select_rows(const plan::ExpertLoads& loads,
                                     const std::vector<std::int64_t>& rows) {
  plan::ExpertLoads out;
  out.num_layers = std::int64_t(rows.size());
  out.num_experts = loads.num_experts;
  for (std::int64_t row : rows) {
    const auto r = loads.row(row);
    out.values.insert(out.values.end(), r.begin(), r.end());
  }
  return out;
}

/// The MoE rows (3..60) of one statistics file.
inline plan::ExpertLoads read_deepseek_moe_rows(const std::string& name) {
  const plan::ExpertLoads all = read_deepseek_stats(name);
  std::vector<std::int64_t> rows;
  for (std::int64_t l = 0; l < all.num_layers; ++l) {
    if (all.layer_total(l) > 0.0) rows.push_back(l);
  }
  return select_rows(all, rows);
}

}  // namespace moestat::test
