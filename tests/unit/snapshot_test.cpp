// Snapshot::logical_totals / physical_totals over window rows and over per-token ids.
#include <gtest/gtest.h>

#include <cstdint>
#include <moestat/snapshot.hpp>
#include <vector>

namespace moestat {
namespace {

// ---- Naive reference ----

/// Sums [W, L, width] rows into [L, width].
std::vector<std::int64_t> reference_row_totals(const std::vector<std::int64_t>& counts,
                                               std::int64_t rows, std::int64_t layers,
                                               std::int64_t width) {
  std::vector<std::int64_t> out(std::size_t(layers * width), 0);
  for (std::int64_t w = 0; w < rows; ++w)
    for (std::int64_t l = 0; l < layers; ++l)
      for (std::int64_t e = 0; e < width; ++e)
        out[std::size_t(l * width + e)] += counts[std::size_t((w * layers + l) * width + e)];
  return out;
}

/// Tallies [N, L, k] ids (skipping -1) into [L, width].
std::vector<std::int64_t> reference_token_totals(const std::vector<std::int32_t>& ids,
                                                 std::int64_t tokens, std::int64_t layers,
                                                 std::int64_t top_k, std::int64_t width) {
  std::vector<std::int64_t> out(std::size_t(layers * width), 0);
  for (std::int64_t n = 0; n < tokens; ++n)
    for (std::int64_t l = 0; l < layers; ++l)
      for (std::int64_t c = 0; c < top_k; ++c) {
        const std::int32_t id = ids[std::size_t((n * layers + l) * top_k + c)];
        if (id >= 0) ++out[std::size_t(l * width + id)];
      }
  return out;
}

TEST(Snapshot, EmptySnapshotHasZeroTotals) {
  Snapshot snapshot;
  snapshot.num_layers = 2;
  snapshot.num_logical_experts = 3;
  snapshot.num_physical_experts = 4;
  snapshot.top_k = 2;
  EXPECT_EQ(snapshot.window_size(), 0);
  EXPECT_EQ(snapshot.num_tokens(), 0);
  EXPECT_EQ(snapshot.logical_totals(), std::vector<std::int64_t>(6, 0));
  EXPECT_EQ(snapshot.physical_totals(), std::vector<std::int64_t>(8, 0));
}

TEST(Snapshot, WindowTotalsSumRows) {
  Snapshot snapshot;
  snapshot.num_layers = 2;
  snapshot.num_logical_experts = 3;
  snapshot.num_physical_experts = 4;
  snapshot.top_k = 1;
  snapshot.pass_ids = {10, 11, 12};
  for (int i = 0; i < 3 * 2 * 3; ++i) snapshot.logical_counts.push_back(i * i % 7);
  for (int i = 0; i < 3 * 2 * 4; ++i) snapshot.physical_counts.push_back(i % 5 + 1);
  EXPECT_EQ(snapshot.window_size(), 3);
  EXPECT_EQ(snapshot.logical_totals(), reference_row_totals(snapshot.logical_counts, 3, 2, 3));
  EXPECT_EQ(snapshot.physical_totals(), reference_row_totals(snapshot.physical_counts, 3, 2, 4));
}

TEST(Snapshot, TokenTotalsTallyIdsPerLayerSkippingMinusOne) {
  Snapshot snapshot;
  snapshot.mode = RecordMode::kPerToken;
  snapshot.num_layers = 3;
  snapshot.num_logical_experts = 2;
  snapshot.num_physical_experts = 4;
  snapshot.top_k = 2;
  snapshot.token_pass_ids = {1, 1};
  snapshot.token_physical_ids = {0, 3,  -1, -1, 2, 2,  //
                                 1, -1, 3,  3,  0, 1};
  snapshot.token_logical_ids = {0, 1,  -1, -1, 0, 0,  //
                                1, -1, 1,  1,  0, 1};
  EXPECT_EQ(snapshot.num_tokens(), 2);
  EXPECT_EQ(snapshot.physical_totals(),
            reference_token_totals(snapshot.token_physical_ids, 2, 3, 2, 4));
  EXPECT_EQ(snapshot.logical_totals(),
            reference_token_totals(snapshot.token_logical_ids, 2, 3, 2, 2));
  // Hand-computed: layer 2 physical = slot 0 once, slot 1 once, slot 2 twice.
  EXPECT_EQ(snapshot.physical_totals(),
            (std::vector<std::int64_t>{1, 1, 0, 1, 0, 0, 0, 2, 1, 1, 2, 0}));
}

}  // namespace
}  // namespace moestat
