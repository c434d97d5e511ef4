// One layer of DeepSeek's EPLB in float32, shared by plan_deepseek and the moestat planner
// (which starts its search from the reference's plan).
#pragma once

#include <cstdint>
#include <moestat/plan/eplb.hpp>
#include <span>
#include <vector>

#include "radix_order.hpp"

namespace moestat::plan::detail {

/// Reusable buffers of deepseek_plan_layer, so planning many layers allocates once.
struct DeepseekScratch {
  std::vector<float> group_load, mlog_load, phy_load;
  std::vector<std::uint64_t> pack_heap, heap;  ///< heap keys: (float bits << 32) | index
  std::vector<std::int32_t> pack_of, rank_in_pack, pack_items, mlog2log, phy2mlog, mlog_count;
  std::vector<KeyedItem> sorted, sort_spare;  ///< (float bits, item)
};

/// Writes the reference's physical_to_logical row for one layer: `weight` [E] (already
/// rounded to float32, non-negative, +0 rather than -0), `phy2log` [P]. `config` must be valid for
/// E (see EplbConfig).
void deepseek_plan_layer(std::span<const float> weight, const EplbConfig& config,
                         std::span<std::int32_t> phy2log, DeepseekScratch& scratch);

/// The float32 sum of `values` in the order of PyTorch's vectorised CPU `sum(-1)` with
/// 8-lane (AVX2) vectors, so group loads round exactly as the reference's do.
float torch_cpu_sum(std::span<const float> values);

}  // namespace moestat::plan::detail
