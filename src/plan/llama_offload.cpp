// The llama.cpp offload plan: whole layers by density (a greedy knapsack), the --n-cpu-moe
// split, and per-expert masks from the hot-expert planner sized to the byte budget.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <moestat/error.hpp>
#include <moestat/plan/hot_experts.hpp>
#include <moestat/plan/llama_offload.hpp>
#include <moestat/plan/metrics.hpp>
#include <numeric>

namespace moestat::plan {
namespace {

double total_load(const ExpertLoads& loads) {
  return std::accumulate(loads.values.begin(), loads.values.end(), 0.0);
}

std::uint64_t layer_bytes(const ExpertLoads& loads, std::span<const std::uint64_t> expert_bytes,
                          std::int64_t layer) {
  return expert_bytes[std::size_t(layer)] * std::uint64_t(loads.num_experts);
}

LayerChoice choice_of(const ExpertLoads& loads, std::span<const std::uint64_t> expert_bytes,
                      std::vector<std::int64_t> layers) {
  std::sort(layers.begin(), layers.end());
  LayerChoice out{.gpu_layers = std::move(layers)};
  double served = 0;
  for (const std::int64_t layer : out.gpu_layers) {
    out.bytes += layer_bytes(loads, expert_bytes, layer);
    served += loads.layer_total(layer);
  }
  const double total = total_load(loads);
  out.share = total > 0 ? served / total : 0.0;
  return out;
}

/// Layers by routed tokens per byte, highest first (ties: the lower layer), taken while they
/// fit. Greedy: with layers of equal size (the usual case) it is the best choice; with sizes
/// that differ (mixed quantisations) it may leave bytes a smaller layer could have used.
LayerChoice densest_layers(const ExpertLoads& loads, std::span<const std::uint64_t> expert_bytes,
                           std::span<const std::int64_t> moe_layers, std::uint64_t budget) {
  std::vector<std::int64_t> order(moe_layers.begin(), moe_layers.end());
  const auto density = [&](std::int64_t layer) {
    return loads.layer_total(layer) / double(layer_bytes(loads, expert_bytes, layer));
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int64_t a, std::int64_t b) { return density(a) > density(b); });
  std::vector<std::int64_t> chosen;
  std::uint64_t used = 0;
  for (const std::int64_t layer : order) {
    const std::uint64_t bytes = layer_bytes(loads, expert_bytes, layer);
    if (bytes > budget - used) continue;
    used += bytes;
    chosen.push_back(layer);
  }
  return choice_of(loads, expert_bytes, std::move(chosen));
}

std::uint64_t mask_bytes(const ExpertLoads& loads, std::span<const std::uint64_t> expert_bytes,
                         std::span<const std::int64_t> moe_layers, const ExpertMask& mask) {
  std::uint64_t bytes = 0;
  for (const std::int64_t layer : moe_layers) {
    const auto first = mask.on_gpu.begin() + layer * loads.num_experts;
    bytes += std::uint64_t(std::count(first, first + loads.num_experts, 1)) *
             expert_bytes[std::size_t(layer)];
  }
  return bytes;
}

}  // namespace

LlamaOffload plan_llama_offload(const ExpertLoads& loads,
                                std::span<const std::uint64_t> expert_bytes,
                                std::uint64_t budget_bytes) {
  loads.validate();
  MOESTAT_CHECK(std::int64_t(expert_bytes.size()) == loads.num_layers,
                "expert bytes are given for {} layers, the counts have {}", expert_bytes.size(),
                loads.num_layers);
  LlamaOffload out;
  for (std::int64_t layer = 0; layer < loads.num_layers; ++layer) {
    if (loads.layer_total(layer) <= 0) continue;
    MOESTAT_CHECK(
        expert_bytes[std::size_t(layer)] > 0 &&
            expert_bytes[std::size_t(layer)] <= std::numeric_limits<std::uint64_t>::max() / 65536 /
                                                    std::uint64_t(loads.num_experts),
        "layer {} routes tokens, but its experts are given {} bytes", layer,
        expert_bytes[std::size_t(layer)]);
    out.moe_layers.push_back(layer);
  }
  out.whole_layers = densest_layers(loads, expert_bytes, out.moe_layers, budget_bytes);

  // --n-cpu-moe: the fewest leading layers on the CPU that leave the rest within the budget.
  std::uint64_t tail = 0;
  std::size_t first_gpu = out.moe_layers.size();
  while (first_gpu > 0 &&
         layer_bytes(loads, expert_bytes, out.moe_layers[first_gpu - 1]) <= budget_bytes - tail) {
    --first_gpu;
    tail += layer_bytes(loads, expert_bytes, out.moe_layers[first_gpu]);
  }
  out.n_cpu_moe = first_gpu == out.moe_layers.size() ? loads.num_layers
                  : first_gpu == 0                   ? 0
                                                     : out.moe_layers[first_gpu - 1] + 1;
  out.last_layers =
      choice_of(loads, expert_bytes,
                std::vector<std::int64_t>(out.moe_layers.begin() + std::ptrdiff_t(first_gpu),
                                          out.moe_layers.end()));

  // Per expert: the largest G whose global top-G fits. The planner's top-G grows by one
  // expert with G, so the bytes grow with G and a binary search finds it.
  const HotExpertOptions frequency{.strategy = HotExpertStrategy::kFrequency};
  std::int64_t low = 0, high = std::int64_t(out.moe_layers.size()) * loads.num_experts;
  while (low < high) {
    const std::int64_t mid = low + (high - low + 1) / 2;
    const ExpertMask mask = choose_hot_experts(loads, mid, frequency);
    if (mask_bytes(loads, expert_bytes, out.moe_layers, mask) <= budget_bytes) {
      low = mid;
    } else {
      high = mid - 1;
    }
  }
  out.experts = choose_hot_experts(loads, low, frequency);
  out.expert_bytes_used = mask_bytes(loads, expert_bytes, out.moe_layers, out.experts);
  out.expert_share = hot_expert_hit_rate(loads, out.experts.on_gpu);
  return out;
}

std::string llama_cpu_override(std::span<const std::int64_t> gpu_layers,
                               std::span<const std::int64_t> moe_layers) {
  std::vector<std::int64_t> cpu;
  std::copy_if(moe_layers.begin(), moe_layers.end(), std::back_inserter(cpu), [&](std::int64_t l) {
    return std::find(gpu_layers.begin(), gpu_layers.end(), l) == gpu_layers.end();
  });
  if (cpu.empty()) return "";
  return fmt::format("blk\\.({})\\.ffn_.*_exps\\.=CPU", fmt::join(cpu, "|"));
}

}  // namespace moestat::plan
