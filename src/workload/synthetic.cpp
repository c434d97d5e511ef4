#include <algorithm>
#include <cmath>
#include <moestat/error.hpp>
#include <moestat/workload.hpp>
#include <numeric>

#include "popularity_law.hpp"
#include "random.hpp"

namespace moestat::workload {
namespace {

using detail::shuffle;
using detail::stream;

Placement make_placement(const ModelTopology& topology, const std::vector<double>& popularity,
                         std::uint64_t seed) {
  const std::int64_t num_experts = topology.num_logical_experts;
  const std::int64_t num_slots = topology.num_physical_experts;
  std::vector<std::int32_t> map(std::size_t(topology.num_layers * num_slots));
  std::vector<std::int32_t> replicas(static_cast<std::size_t>(num_experts));
  for (std::int64_t layer = 0; layer < topology.num_layers; ++layer) {
    std::span<std::int32_t> row(map.data() + layer * num_slots, std::size_t(num_slots));
    if (!topology.is_moe(layer)) {
      for (std::int64_t slot = 0; slot < num_slots; ++slot) {
        row[std::size_t(slot)] = std::int32_t(slot % num_experts);
      }
      continue;
    }
    // Each redundant slot goes to the expert with the highest load per replica (EPLB's
    // replication step), then slots are shuffled so the map is far from trivial.
    const double* load = popularity.data() + layer * num_experts;
    std::fill(replicas.begin(), replicas.end(), 1);
    for (std::int64_t extra = num_experts; extra < num_slots; ++extra) {
      std::int64_t best = 0;
      for (std::int64_t expert = 1; expert < num_experts; ++expert) {
        if (load[expert] / replicas[std::size_t(expert)] >
            load[best] / replicas[std::size_t(best)]) {
          best = expert;
        }
      }
      ++replicas[std::size_t(best)];
    }
    std::size_t slot = 0;
    for (std::int64_t expert = 0; expert < num_experts; ++expert) {
      for (std::int32_t r = 0; r < replicas[std::size_t(expert)]; ++r) {
        row[slot++] = std::int32_t(expert);
      }
    }
    Rng rng = stream(seed, detail::kPlacement, std::uint64_t(layer));
    shuffle(row, rng);
  }
  return Placement(topology.num_layers, num_slots, num_experts, std::move(map), 1);
}

std::shared_ptr<const std::vector<detail::LayerLaw>> make_laws(const ModelTopology& topology,
                                                               const PopularityModel& model,
                                                               const SyntheticOptions& options) {
  auto laws = std::make_shared<std::vector<detail::LayerLaw>>(std::size_t(topology.num_layers));
  std::int64_t moe_index = 0;
  for (std::int64_t layer = 0; layer < topology.num_layers; ++layer) {
    if (!topology.is_moe(layer)) continue;
    (*laws)[std::size_t(layer)] =
        detail::draw_layer_law(topology, model, options.seed, layer, moe_index++,
                               topology.num_moe_layers(), options.num_passes, options.drift_passes);
  }
  return laws;
}

std::vector<double> initial_popularity(const ModelTopology& topology, const PopularityModel& model,
                                       const SyntheticOptions& options,
                                       const std::vector<detail::LayerLaw>& laws) {
  const auto num_experts = static_cast<std::size_t>(topology.num_logical_experts);
  std::vector<double> out(std::size_t(topology.num_layers) * num_experts, 0.0);
  std::vector<double> prefill(num_experts), decode(num_experts);
  for (std::int64_t layer = 0; layer < topology.num_layers; ++layer) {
    if (!topology.is_moe(layer)) continue;
    const detail::LayerLaw& law = laws[std::size_t(layer)];
    detail::layer_popularity(law, topology, model, options.drift_passes, 0, Phase::kPrefill,
                             prefill);
    detail::layer_popularity(law, topology, model, options.drift_passes, 0, Phase::kDecode, decode);
    for (std::size_t e = 0; e < num_experts; ++e) {
      out[std::size_t(layer) * num_experts + e] = 0.5 * (prefill[e] + decode[e]);
    }
  }
  return out;
}

/// Vose's alias tables for O(1) draws from `weights` (summing to 1).
void build_alias(std::span<const double> weights, std::span<double> probability,
                 std::span<std::int32_t> alias) {
  const std::size_t n = weights.size();
  std::vector<std::int32_t> small, large;
  std::vector<double> scaled(n);
  for (std::size_t e = 0; e < n; ++e) {
    scaled[e] = weights[e] * double(n);
    alias[e] = std::int32_t(e);
    (scaled[e] < 1.0 ? small : large).push_back(std::int32_t(e));
  }
  while (!small.empty() && !large.empty()) {
    const std::int32_t less = small.back();
    small.pop_back();
    const std::int32_t more = large.back();
    probability[std::size_t(less)] = scaled[std::size_t(less)];
    alias[std::size_t(less)] = more;
    scaled[std::size_t(more)] -= 1.0 - scaled[std::size_t(less)];
    if (scaled[std::size_t(more)] < 1.0) {
      large.pop_back();
      small.push_back(more);
    }
  }
  // Leftovers are 1 up to rounding.
  for (std::int32_t e : small) probability[std::size_t(e)] = 1.0;
  for (std::int32_t e : large) probability[std::size_t(e)] = 1.0;
}

/// Captured-graph batch sizes a decode batch is padded up to (SGLang's default list, cut).
constexpr std::int64_t kGraphBatchSizes[] = {1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64};
/// Prefill batches are padded to a multiple of this (a data-parallel attention pad, say).
constexpr std::int64_t kPrefillPadding = 64;
/// Experts per token the generator draws at most (a fixed scratch array).
constexpr std::int64_t kMaxTopK = 64;

}  // namespace

ModelTopology deepseek_like_topology() {
  ModelTopology topology = ModelTopology::uniform(61, 256, 8);
  for (int layer = 0; layer < 3; ++layer) topology.moe_layers[std::size_t(layer)] = false;
  topology.num_physical_experts = 288;
  topology.ep_size = 32;
  topology.num_groups = 8;
  topology.validate();
  return topology;
}

void SyntheticOptions::validate() const {
  MOESTAT_CHECK(num_passes > 0, "workload: num_passes must be positive, got {}", num_passes);
  MOESTAT_CHECK(prefill_fraction >= 0.0 && prefill_fraction <= 1.0,
                "workload: prefill_fraction must be in [0, 1], got {}", prefill_fraction);
  MOESTAT_CHECK(min_decode_tokens >= 0 && min_decode_tokens <= max_decode_tokens &&
                    max_decode_tokens <= kGraphBatchSizes[std::size(kGraphBatchSizes) - 1],
                "workload: decode tokens must satisfy 0 <= min ({}) <= max ({}) <= {}",
                min_decode_tokens, max_decode_tokens,
                kGraphBatchSizes[std::size(kGraphBatchSizes) - 1]);
  MOESTAT_CHECK(min_prefill_tokens >= 0 && min_prefill_tokens <= max_prefill_tokens,
                "workload: prefill tokens must satisfy 0 <= min ({}) <= max ({})",
                min_prefill_tokens, max_prefill_tokens);
  MOESTAT_CHECK(drift_passes > 0, "workload: drift_passes must be positive, got {}", drift_passes);
  MOESTAT_CHECK(minus_one_rate >= 0.0 && out_of_range_rate >= 0.0 &&
                    minus_one_rate + out_of_range_rate <= 1.0,
                "workload: minus_one_rate ({}) and out_of_range_rate ({}) must be non-negative "
                "and sum to at most 1",
                minus_one_rate, out_of_range_rate);
}

SyntheticWorkload::SyntheticWorkload(ModelTopology topology, PopularityModel popularity,
                                     SyntheticOptions options)
    : topology_((topology.validate(), std::move(topology))),
      options_((options.validate(), options)),
      model_((popularity.validate(topology_), std::move(popularity))),
      laws_(make_laws(topology_, model_, options_)),
      popularity_(initial_popularity(topology_, model_, options_, *laws_)),
      placement_(make_placement(topology_, popularity_, options_.seed)) {
  MOESTAT_CHECK(topology_.top_k <= kMaxTopK, "workload: top_k {} above the supported {}",
                topology_.top_k, kMaxTopK);
  const std::int64_t num_experts = topology_.num_logical_experts;
  const std::int64_t num_slots = topology_.num_physical_experts;

  // Replica lists per (layer, expert), so a draw can pick one of the expert's slots.
  replica_offsets_.assign(std::size_t(topology_.num_layers * (num_experts + 1)), 0);
  replica_slots_.assign(std::size_t(topology_.num_layers * num_slots), 0);
  for (std::int64_t layer = 0; layer < topology_.num_layers; ++layer) {
    std::int32_t* offsets = replica_offsets_.data() + layer * (num_experts + 1);
    std::int32_t* slots = replica_slots_.data() + layer * num_slots;
    for (std::int64_t slot = 0; slot < num_slots; ++slot) {
      ++offsets[placement_.logical_of(layer, slot) + 1];
    }
    for (std::int64_t e = 0; e < num_experts; ++e) offsets[e + 1] += offsets[e];
    std::vector<std::int32_t> fill(offsets, offsets + num_experts);
    for (std::int64_t slot = 0; slot < num_slots; ++slot) {
      slots[fill[std::size_t(placement_.logical_of(layer, slot))]++] = std::int32_t(slot);
    }
  }
}

SyntheticWorkload::SyntheticWorkload(const Preset& preset, SyntheticOptions options)
    : SyntheticWorkload(preset.topology, preset.popularity, options) {}

void SyntheticWorkload::popularity(std::int64_t pass, std::int64_t layer, Phase phase,
                                   std::span<double> out) const {
  MOESTAT_CHECK(topology_.is_moe(layer), "workload: layer {} is not a MoE layer", layer);
  MOESTAT_CHECK(pass >= 0 && pass < options_.num_passes, "workload: pass {} out of range [0, {})",
                pass, options_.num_passes);
  detail::layer_popularity((*laws_)[std::size_t(layer)], topology_, model_, options_.drift_passes,
                           pass, phase, out);
}

PassBatch SyntheticWorkload::batch(std::int64_t pass) const {
  MOESTAT_CHECK(pass >= 0 && pass < options_.num_passes, "workload: pass {} out of range [0, {})",
                pass, options_.num_passes);
  Rng rng = stream(options_.seed, detail::kBatch, std::uint64_t(pass));
  PassBatch out;
  out.pass_id = pass;
  out.prefill = rng.uniform() < options_.prefill_fraction;
  if (out.prefill) {
    out.num_valid_tokens = options_.min_prefill_tokens +
                           std::int64_t(rng.below(std::uint64_t(options_.max_prefill_tokens -
                                                                options_.min_prefill_tokens + 1)));
    out.num_rows = (out.num_valid_tokens + kPrefillPadding - 1) / kPrefillPadding * kPrefillPadding;
  } else {
    out.num_valid_tokens = options_.min_decode_tokens +
                           std::int64_t(rng.below(std::uint64_t(options_.max_decode_tokens -
                                                                options_.min_decode_tokens + 1)));
    out.num_rows = *std::lower_bound(std::begin(kGraphBatchSizes), std::end(kGraphBatchSizes),
                                     out.num_valid_tokens);
  }
  return out;
}

void SyntheticWorkload::fill_topk(std::int64_t pass, std::int64_t layer,
                                  std::span<std::int32_t> physical_ids,
                                  std::span<std::int32_t> logical_ids) const {
  const PassBatch shape = batch(pass);
  const std::int64_t top_k = topology_.top_k;
  const std::int64_t num_experts = topology_.num_logical_experts;
  const std::int64_t num_slots = topology_.num_physical_experts;
  MOESTAT_CHECK(topology_.is_moe(layer), "workload: layer {} is not a MoE layer", layer);
  MOESTAT_CHECK(std::int64_t(physical_ids.size()) == shape.num_rows * top_k,
                "workload: physical_ids holds {} ids, pass {} needs {} rows x {}",
                physical_ids.size(), pass, shape.num_rows, top_k);
  MOESTAT_CHECK(logical_ids.empty() || logical_ids.size() == physical_ids.size(),
                "workload: logical_ids holds {} ids, expected 0 or {}", logical_ids.size(),
                physical_ids.size());
  const bool want_logical = !logical_ids.empty();
  Rng rng = stream(options_.seed, detail::kIds, std::uint64_t(pass), std::uint64_t(layer));
  // This pass's popularity of the layer, as alias tables.
  std::vector<double> weights(static_cast<std::size_t>(num_experts));
  std::vector<double> probability(weights.size());
  std::vector<std::int32_t> alias(weights.size());
  popularity(pass, layer, shape.prefill ? Phase::kPrefill : Phase::kDecode, weights);
  build_alias(weights, probability, alias);
  const std::int64_t group_limit = model_.group_limit;
  const std::int64_t experts_per_group = num_experts / topology_.num_groups;
  const std::int32_t* offsets = replica_offsets_.data() + layer * (num_experts + 1);
  const std::int32_t* slots = replica_slots_.data() + layer * num_slots;
  const double minus_one_below = options_.minus_one_rate;
  const double out_of_range_below = minus_one_below + options_.out_of_range_rate;
  std::int32_t chosen[kMaxTopK];  // top_k distinct experts of the current token
  std::int64_t groups[kMaxTopK];  // the groups they are in
  for (std::int64_t token = 0; token < shape.num_rows; ++token) {
    std::int32_t* physical = physical_ids.data() + token * top_k;
    std::int32_t* logical = want_logical ? logical_ids.data() + token * top_k : nullptr;
    if (token >= shape.num_valid_tokens) {
      // Padding rows of a graph batch: whatever the buffer held, in range or not.
      for (std::int64_t c = 0; c < top_k; ++c) {
        physical[c] = std::int32_t(std::int64_t(rng.below(std::uint64_t(num_slots + 33))) - 1);
        if (want_logical) logical[c] = -1;
      }
      continue;
    }
    std::int64_t num_groups_used = 0;
    for (std::int64_t c = 0; c < top_k; ++c) {
      std::int32_t expert;
      std::int64_t group;
      bool rejected;
      do {  // distinct experts per token, as a router's top-k; hot ones repeat rarely
        const auto column = std::size_t(rng.below(std::uint64_t(num_experts)));
        expert = rng.uniform() < probability[column] ? std::int32_t(column) : alias[column];
        group = expert / experts_per_group;
        const bool new_group =
            std::find(groups, groups + num_groups_used, group) == groups + num_groups_used;
        // Group-limited routing: once a token uses group_limit groups, it stays in them.
        rejected = std::find(chosen, chosen + c, expert) != chosen + c ||
                   (group_limit > 0 && new_group && num_groups_used == group_limit);
        if (!rejected && new_group) groups[num_groups_used++] = group;
      } while (rejected);
      chosen[c] = expert;
      const std::int32_t first = offsets[expert];
      const std::int32_t count = offsets[expert + 1] - first;
      std::int32_t slot = slots[first + std::int32_t(rng.below(std::uint64_t(count)))];
      std::int32_t drawn = expert;
      const double fault = rng.uniform();
      if (fault < minus_one_below) {
        slot = drawn = -1;
      } else if (fault < out_of_range_below) {
        slot = std::int32_t(num_slots + std::int64_t(rng.below(8)));
        drawn = -1;
      }
      physical[c] = slot;
      if (want_logical) logical[c] = drawn;
    }
  }
}

}  // namespace moestat::workload
