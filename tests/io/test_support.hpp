// Helpers shared by the io and cli tests: expecting moestat errors, scratch directories,
// comparing snapshots field by field.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <bit>
#include <filesystem>
#include <moestat/error.hpp>
#include <moestat/snapshot.hpp>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace moestat::test {

/// Runs `body` and expects a moestat::Error whose message contains every `needle`.
template <typename Body>
void expect_error(Body&& body, std::initializer_list<std::string_view> needles) {
  try {
    body();
    ADD_FAILURE() << "expected a moestat::Error mentioning '" << *needles.begin() << "'";
  } catch (const Error& error) {
    for (std::string_view needle : needles) {
      EXPECT_NE(error.message().find(needle), std::string::npos)
          << "message: " << error.message() << "\nmissing: " << needle;
    }
  }
}

/// A fresh empty directory under the system temp dir, removed with its contents at the end.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "moestat-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ignored);
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }
  /// Names of the entries in the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::filesystem::path path_;
};

/// Doubles compared bit for bit, so -0.0 vs 0.0 or a last-digit change is a difference.
inline std::vector<std::uint64_t> bits(const std::vector<double>& values) {
  std::vector<std::uint64_t> out;
  for (double value : values) out.push_back(std::bit_cast<std::uint64_t>(value));
  return out;
}

/// The first field in which two snapshots differ ("" when every field is equal, exactly).
inline std::string snapshot_difference(const Snapshot& a, const Snapshot& b) {
#define MOESTAT_TEST_FIELD(field) \
  if (!(a.field == b.field)) return #field
  MOESTAT_TEST_FIELD(mode);
  MOESTAT_TEST_FIELD(approximate);
  MOESTAT_TEST_FIELD(num_layers);
  MOESTAT_TEST_FIELD(num_logical_experts);
  MOESTAT_TEST_FIELD(num_physical_experts);
  MOESTAT_TEST_FIELD(top_k);
  MOESTAT_TEST_FIELD(pass_ids);
  MOESTAT_TEST_FIELD(placement_versions);
  MOESTAT_TEST_FIELD(pass_num_tokens);
  MOESTAT_TEST_FIELD(logical_counts);
  MOESTAT_TEST_FIELD(physical_counts);
  MOESTAT_TEST_FIELD(token_pass_ids);
  MOESTAT_TEST_FIELD(token_placement_versions);
  MOESTAT_TEST_FIELD(token_physical_ids);
  MOESTAT_TEST_FIELD(token_logical_ids);
  MOESTAT_TEST_FIELD(num_passes);
  MOESTAT_TEST_FIELD(dropped_ids);
  MOESTAT_TEST_FIELD(dropped_tokens);
  MOESTAT_TEST_FIELD(dropped_passes);
#undef MOESTAT_TEST_FIELD
  if (bits(a.decayed_logical_load) != bits(b.decayed_logical_load)) return "decayed_logical_load";
  if (bits(a.decayed_physical_load) != bits(b.decayed_physical_load)) {
    return "decayed_physical_load";
  }
  return "";
}

}  // namespace moestat::test
