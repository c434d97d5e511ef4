#include "read_budget.hpp"

#include <limits>
#include <moestat/error.hpp>
#include <moestat/io/read_bounds.hpp>

namespace moestat::io::detail {

ReadBudget::ReadBudget(std::uint64_t file_bytes, std::uint64_t expansion)
    : expansion_(expansion),
      total_(expansion != 0 &&
                     file_bytes > std::numeric_limits<std::uint64_t>::max() / 2 / expansion
                 ? std::numeric_limits<std::uint64_t>::max()
                 : expansion * file_bytes + (std::uint64_t(1) << 20)),
      left_(total_) {}

void ReadBudget::spend(std::uint64_t bytes, std::string_view what) {
  MOESTAT_CHECK(bytes <= left_,
                "{} would take more than {} bytes of memory, the bound for a file of this size "
                "({} times its size plus 1 MiB)",
                what, total_, expansion_);
  left_ -= bytes;
}

}  // namespace moestat::io::detail

namespace moestat::io {

std::uint64_t read_memory_bound(std::uint64_t file_bytes) noexcept {
  return detail::ReadBudget(file_bytes, kReadExpansion).left();
}

}  // namespace moestat::io
