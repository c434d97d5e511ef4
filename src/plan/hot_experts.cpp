// Hot-expert strategies. Per-layer strategies pick each layer's experts independently; the
// two global ones rank all (MoE layer, expert) cells by load, heaviest first.
#include <algorithm>
#include <cmath>
#include <moestat/error.hpp>
#include <moestat/plan/hot_experts.hpp>
#include <moestat/rng.hpp>
#include <numeric>

namespace moestat::plan {
namespace {

constexpr std::string_view kNames[] = {"uniform", "front-loading", "random", "frequency",
                                       "layer-balanced"};

/// The budget split evenly over `moe_layers` (the first layers take the remainder).
std::vector<std::int64_t> even_split(std::int64_t budget, std::size_t moe_layers,
                                     std::int64_t num_experts) {
  std::vector<std::int64_t> counts(moe_layers, 0);
  const auto m = std::int64_t(moe_layers);
  for (std::int64_t i = 0; i < m; ++i) {
    counts[std::size_t(i)] = std::min(num_experts, budget / m + (i < budget % m ? 1 : 0));
  }
  return counts;
}

/// Cells (layer, expert) of the MoE layers in order of load, heaviest first, ties to the
/// lower (layer, expert): each layer sorted on its own, then merged lazily, so a budget of G
/// cells costs O(L E log E + G log L) rather than a sort of all cells.
class CellsByLoad {
 public:
  CellsByLoad(const ExpertLoads& loads, const std::vector<std::int64_t>& moe_layers)
      : E_(loads.num_experts) {
    for (const std::int64_t l : moe_layers) {
      std::vector<std::pair<double, std::int64_t>> row;
      row.reserve(std::size_t(E_));
      for (std::int64_t e = 0; e < E_; ++e) row.emplace_back(loads.at(l, e), l * E_ + e);
      std::sort(row.begin(), row.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
      });
      rows_.push_back(std::move(row));
    }
    next_.assign(rows_.size(), 0);
    for (std::size_t r = 0; r < rows_.size(); ++r) heap_.push_back(r);
    std::make_heap(heap_.begin(), heap_.end(),
                   [this](std::size_t a, std::size_t b) { return later(a, b); });
  }

  /// The `rank`-th heaviest cell of layer number `r` (in MoE-layer order).
  std::int64_t in_layer(std::size_t r, std::int64_t rank) const {
    return rows_[r][std::size_t(rank)].second;
  }
  std::size_t num_layers() const { return rows_.size(); }

  /// The next cell in the global order, skipping cells `skip` rejects and dropping layers
  /// `exhausted` says are full; -1 when none is left.
  template <typename Skip, typename Exhausted>
  std::int64_t next(Skip skip, Exhausted exhausted) {
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(),
                    [this](std::size_t a, std::size_t b) { return later(a, b); });
      const std::size_t r = heap_.back();
      heap_.pop_back();
      if (exhausted(r)) continue;
      const std::int64_t cell = rows_[r][next_[r]++].second;
      if (next_[r] < rows_[r].size()) {
        heap_.push_back(r);
        std::push_heap(heap_.begin(), heap_.end(),
                       [this](std::size_t a, std::size_t b) { return later(a, b); });
      }
      if (!skip(cell)) return cell;
    }
    return -1;
  }

 private:
  std::int64_t E_;
  std::vector<std::vector<std::pair<double, std::int64_t>>> rows_;
  std::vector<std::size_t> next_;
  std::vector<std::size_t> heap_;
  /// Heap order: the head with the larger load (then the lower cell) on top.
  bool later(std::size_t a, std::size_t b) const {
    const auto& x = rows_[a][next_[a]];
    const auto& y = rows_[b][next_[b]];
    return x.first != y.first ? x.first < y.first : x.second > y.second;
  }
};

}  // namespace

std::string_view hot_expert_strategy_name(HotExpertStrategy strategy) noexcept {
  return kNames[static_cast<std::size_t>(strategy)];
}

HotExpertStrategy parse_hot_expert_strategy(std::string_view name) {
  for (std::size_t i = 0; i < std::size(kNames); ++i) {
    if (kNames[i] == name) return static_cast<HotExpertStrategy>(i);
  }
  MOESTAT_FAIL("unknown hot-expert strategy '{}': expected one of {}", name,
               fmt::join(kNames, ", "));
}

std::int64_t num_moe_layers(const ExpertLoads& loads) {
  std::int64_t count = 0;
  for (std::int64_t l = 0; l < loads.num_layers; ++l) count += loads.layer_total(l) > 0.0 ? 1 : 0;
  return count;
}

std::int64_t hot_expert_budget_per_layer(const ExpertLoads& loads, std::int64_t per_layer) {
  loads.validate();
  MOESTAT_CHECK(per_layer >= 0 && per_layer <= loads.num_experts,
                "hot experts: {} GPU experts per layer is outside [0, {}]", per_layer,
                loads.num_experts);
  return per_layer * num_moe_layers(loads);
}

std::int64_t hot_expert_budget_ratio(const ExpertLoads& loads, double ratio) {
  loads.validate();
  MOESTAT_CHECK(ratio >= 0.0 && ratio <= 1.0, "hot experts: ratio {} is outside [0, 1]", ratio);
  return std::llround(ratio * double(num_moe_layers(loads) * loads.num_experts));
}

ExpertMask choose_hot_experts(const ExpertLoads& loads, std::int64_t budget,
                              const HotExpertOptions& options) {
  loads.validate();
  const std::int64_t E = loads.num_experts;
  std::vector<std::int64_t> moe_layers;
  for (std::int64_t l = 0; l < loads.num_layers; ++l) {
    if (loads.layer_total(l) > 0.0) moe_layers.push_back(l);
  }
  const auto M = std::int64_t(moe_layers.size());
  MOESTAT_CHECK(budget >= 0 && budget <= M * E,
                "hot experts: a budget of {} GPU experts is outside [0, {}] ({} MoE layers x {} "
                "experts)",
                budget, M * E, M, E);
  MOESTAT_CHECK(options.min_share >= 0.0 && options.min_share <= options.max_share,
                "hot experts: need 0 <= min_share <= max_share, got {} and {}", options.min_share,
                options.max_share);

  ExpertMask mask;
  mask.num_layers = loads.num_layers;
  mask.num_experts = E;
  mask.on_gpu.assign(std::size_t(loads.num_layers * E), 1);  // dense layers stay all 1
  std::vector<std::int64_t> layer_count(std::size_t(loads.num_layers), E);
  for (const std::int64_t l : moe_layers) {
    std::fill_n(mask.on_gpu.begin() + std::ptrdiff_t(l * E), E, std::uint8_t{0});
    layer_count[std::size_t(l)] = 0;
  }
  const auto put = [&](std::int64_t layer, std::int64_t expert) {
    mask.on_gpu[std::size_t(layer * E + expert)] = 1;
    ++layer_count[std::size_t(layer)];
  };

  switch (options.strategy) {
    case HotExpertStrategy::kUniform:
    case HotExpertStrategy::kRandom: {
      const std::vector<std::int64_t> counts = even_split(budget, moe_layers.size(), E);
      Rng rng(options.seed);
      std::vector<std::int64_t> experts(static_cast<std::size_t>(E));
      for (std::size_t i = 0; i < moe_layers.size(); ++i) {
        std::iota(experts.begin(), experts.end(), 0);
        for (std::int64_t k = 0; k < counts[i]; ++k) {
          if (options.strategy == HotExpertStrategy::kRandom) {  // partial Fisher-Yates
            const auto j = k + std::int64_t(rng.below(std::uint64_t(E - k)));
            std::swap(experts[std::size_t(k)], experts[std::size_t(j)]);
          }
          put(moe_layers[i], experts[std::size_t(k)]);
        }
      }
      break;
    }
    case HotExpertStrategy::kFrontLoading: {
      std::int64_t left = budget;
      for (const std::int64_t l : moe_layers) {
        for (std::int64_t e = 0; e < std::min(E, left); ++e) put(l, e);
        left -= std::min(E, left);
      }
      break;
    }
    case HotExpertStrategy::kFrequency: {
      CellsByLoad cells(loads, moe_layers);
      for (std::int64_t i = 0; i < budget; ++i) {
        const std::int64_t cell =
            cells.next([](std::int64_t) { return false; }, [](std::size_t) { return false; });
        put(cell / E, cell % E);
      }
      break;
    }
    case HotExpertStrategy::kLayerBalanced: {
      const double share = M > 0 ? double(budget) / double(M) : 0.0;
      const std::int64_t low = std::min<std::int64_t>(E, std::int64_t(options.min_share * share));
      // Caps that cannot hold the whole budget are raised until they can.
      const std::int64_t high =
          std::clamp<std::int64_t>(std::int64_t(std::ceil(options.max_share * share)),
                                   (budget + M - 1) / std::max<std::int64_t>(M, 1), E);
      CellsByLoad cells(loads, moe_layers);
      std::int64_t left = budget;
      // First every layer's own heaviest `low` experts, then the global order within caps.
      for (std::size_t r = 0; r < cells.num_layers(); ++r) {
        for (std::int64_t k = 0; k < low && left > 0; ++k, --left) {
          const std::int64_t cell = cells.in_layer(r, k);
          put(cell / E, cell % E);
        }
      }
      while (left > 0) {
        const std::int64_t cell = cells.next(
            [&](std::int64_t c) { return mask.on_gpu[std::size_t(c)] != 0; },
            [&](std::size_t r) { return layer_count[std::size_t(moe_layers[r])] >= high; });
        if (cell < 0) break;
        put(cell / E, cell % E);
        --left;
      }
      break;
    }
  }
  return mask;
}

}  // namespace moestat::plan
