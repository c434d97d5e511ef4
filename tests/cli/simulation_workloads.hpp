// The hand-made workloads the simulator's CLI tests replay: tiny, so a scenario runs in a
// moment.
#pragma once

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <vector>

namespace moestat::test {

/// Writes an SGLang-style counts file: two layers (one dense) of 8 experts, `hot` experts
/// getting 20 times the others' load.
inline void write_workload(const std::filesystem::path& path, std::initializer_list<int> hot) {
  nlohmann::json counts = nlohmann::json::array();
  counts.push_back(std::vector<int>(8, 0));
  std::vector<int> row(8, 50);
  for (int e : hot) row[std::size_t(e)] = 1000;
  counts.push_back(row);
  std::ofstream(path) << nlohmann::json{{"logical_count", counts}}.dump();
}

}  // namespace moestat::test
