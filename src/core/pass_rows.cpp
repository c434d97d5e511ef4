#include <moestat/error.hpp>
#include <moestat/pass_rows.hpp>

namespace moestat {
namespace {

template <typename T>
void append_values(std::vector<T>& to, const std::vector<T>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

/// Entries [first, end) of `values`, or none when the source left it empty.
template <typename T>
std::vector<T> slice_of(const std::vector<T>& values, std::int64_t first, std::int64_t end) {
  if (values.empty()) return {};
  return {values.begin() + first, values.begin() + end};
}

}  // namespace

void PassRows::push_back(std::int64_t pass_id, std::uint64_t placement_version,
                         std::int64_t num_tokens) {
  pass_ids.push_back(pass_id);
  placement_versions.push_back(placement_version);
  pass_num_tokens.push_back(num_tokens);
}

void PassRows::append(const PassRows& other) {
  append_values(pass_ids, other.pass_ids);
  append_values(placement_versions, other.placement_versions);
  append_values(pass_num_tokens, other.pass_num_tokens);
}

PassRows PassRows::slice(std::int64_t first, std::int64_t end) const {
  MOESTAT_CHECK(0 <= first && first <= end, "internal: pass rows [{}, {}) are no range", first,
                end);
  for (const std::size_t size :
       {pass_ids.size(), placement_versions.size(), pass_num_tokens.size()}) {
    MOESTAT_CHECK(size == 0 || std::int64_t(size) >= end,
                  "internal: pass rows [{}, {}) are past the {} passes held", first, end, size);
  }
  return {.pass_ids = slice_of(pass_ids, first, end),
          .placement_versions = slice_of(placement_versions, first, end),
          .pass_num_tokens = slice_of(pass_num_tokens, first, end)};
}

}  // namespace moestat
