#include <moestat/checked_math.hpp>
#include <moestat/snapshot.hpp>

namespace moestat {
namespace {

/// Sums rows of `width` ids over `rows`, or tallies [N, L, k] token ids into [L, width].
std::vector<std::int64_t> totals(const Snapshot& snapshot, const std::vector<std::int64_t>& counts,
                                 const std::vector<std::int32_t>& token_ids, std::int64_t width) {
  const std::int64_t layer_size = snapshot.num_layers * width;
  std::vector<std::int64_t> out(std::size_t(layer_size), 0);
  // As CountWindow::totals: the grand total (counts, then one per token id) is checked, so
  // every total and every sum of totals fits.
  std::int64_t all = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    all = checked_add(all, counts[i], "the sum of the snapshot's counts");
    out[i % std::size_t(layer_size)] += counts[i];
  }
  checked_add(all, std::int64_t(token_ids.size()), "the sum of the snapshot's counts");
  const std::int64_t token_size = snapshot.num_layers * snapshot.top_k;
  for (std::size_t i = 0; i < token_ids.size(); ++i) {
    const std::int32_t id = token_ids[i];
    if (id < 0) continue;
    const auto layer = std::int64_t(i % std::size_t(token_size)) / snapshot.top_k;
    ++out[std::size_t(layer * width + id)];
  }
  return out;
}

}  // namespace

std::vector<std::int64_t> Snapshot::logical_totals() const {
  return totals(*this, logical_counts, token_logical_ids, num_logical_experts);
}

std::vector<std::int64_t> Snapshot::physical_totals() const {
  return totals(*this, physical_counts, token_physical_ids, num_physical_experts);
}

}  // namespace moestat
