// SGLang-compatible files: the expert-distribution recorder's dumps (stat, per-pass,
// per-token), placements for --init-expert-location and KTransformers-style GPU expert
// masks, as the .pt values SGLang's torch.save writes and torch.load reads.
// Layouts in docs/formats.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <moestat/counts.hpp>
#include <moestat/expert_mask.hpp>
#include <moestat/io/pt.hpp>
#include <moestat/placement.hpp>
#include <moestat/snapshot.hpp>
#include <optional>
#include <string>

namespace moestat::io {

// ---- recorder dumps ----

/// Where SGLang's recorder writes: $SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR, else /tmp.
std::filesystem::path sglang_dump_directory();

/// `expert_distribution_recorder_{unix_time}.pt` for a stat dump (which only rank 0 writes)
/// or `expert_distribution_recorder_{unix_time}_{rank}.pt` for per-pass and per-token
/// dumps (one per rank); unix_time is printed as Python prints time.time().
std::string sglang_dump_name(double unix_time, std::optional<std::int64_t> rank = {});

/// SGLang's stat dump: {"rank": int, "logical_count": [W, L, E] (or [L, E] when `counts`
/// has no window axis) int32, "average_utilization_rate_over_window": float or None}.
/// Counts above int32's range are written as int64; pass metadata has no place in it.
PtValue sglang_stat_dump(const CountWindow& counts, std::int64_t rank = 0,
                         std::optional<double> average_utilization = {});

/// SGLang's per-pass dump: {"records": [one dict per pass: "forward_pass_id", "rank",
/// "gatherer_key": "primary", "global_physical_count" [L, P] int32],
/// "last_physical_to_logical_map": [L, P] int64}. `snapshot` must be in a pass-based mode.
PtValue sglang_per_pass_dump(const Snapshot& snapshot, const Placement& last_placement,
                             std::int64_t rank);

/// SGLang's per-token dump: as per-pass, each record also holding "topk_ids_of_layer"
/// [L, n, top_k] int32, the physical ids of the pass's n kept tokens (-1 = none).
/// `snapshot` must be in per_token mode. SGLang's records also carry the engine's
/// input_ids, positions and batch metadata, which moestat does not see; they are left out.
PtValue sglang_per_token_dump(const Snapshot& snapshot, const Placement& last_placement,
                              std::int64_t rank);

/// Writes the dump that matches the snapshot's mode (stat for stat, stat_approx and
/// decayed is refused; per_pass; per_token) into `directory` (sglang_dump_directory() when
/// empty, created if missing) under sglang_dump_name(now, rank), atomically. Returns the
/// path written.
std::filesystem::path write_sglang_dump(const Snapshot& snapshot, const Placement& placement,
                                        std::int64_t rank,
                                        const std::filesystem::path& directory = {});

// ---- reading .pt values ----

/// Logical counts from a .pt value: a dict whose "logical_count" is an integer tensor
/// [L, E] or [W, L, E] (a stat dump; the rest of the dict is ignored), or a per-pass or
/// per-token dump, whose records' global_physical_count are mapped to logical experts
/// through last_physical_to_logical_map (the map in force at the dump: SGLang keeps no
/// other), with the records' forward_pass_id as pass ids. moestat::Error naming what is
/// missing or malformed.
CountWindow logical_counts_from_pt(const PtValue& value);

/// {"physical_to_logical_map": [L, P] int64}: exactly what --init-expert-location loads
/// (it passes the dict's keys as arguments, so there are no others).
PtValue placement_to_pt(const Placement& placement);
/// Reads "physical_to_logical_map" (int32 or int64 [L, P]) from a dict; E as in
/// placement_from_json.
Placement placement_from_pt(const PtValue& value, std::int64_t num_logical_experts = 0,
                            std::uint64_t version = 0);

// ---- expert masks ----

/// The mask as a bool tensor [L, E] (what torch.save of KTransformers' masks holds).
HostTensor expert_mask_tensor(const ExpertMask& mask);
/// A bool (or 0/1 integer) tensor [L, E] as a mask; moestat::Error otherwise.
ExpertMask expert_mask_from_tensor(const HostTensor& tensor);

}  // namespace moestat::io
