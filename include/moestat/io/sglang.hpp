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
#include <span>
#include <string>
#include <vector>

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
/// The same around an engine's logical_count: an int32 or int64 [W, L, E] or [L, E] tensor, laid
/// out as SGLang's buffer (W = 0 too: an unbounded buffer before any pass), written int32 (int64
/// above int32's range) on its `device`, as torch.save writes a storage's location (SGLang
/// keeps it on its GPU), so torch.load puts it back there. `pass_balancedness`, when given,
/// is added as "eplb_balancedness", a [P] float32 CPU tensor: the per-pass values SGLang
/// only logs, which moestat also dumps.
PtValue sglang_stat_dump(HostTensor logical_count, std::int64_t rank,
                         std::optional<double> average_utilization,
                         std::optional<std::vector<float>> pass_balancedness = {});

/// What SGLang's recorder keeps of a pass beside its counts, which only the engine sees: a
/// per-pass or per-token dump built with these writes exactly the records SGLang writes.
struct SglangPassRecord {
  std::int64_t pass_id = 0;          ///< the recorder's pass id (Snapshot::pass_ids)
  std::int64_t forward_pass_id = 0;  ///< SGLang's, written as the record's forward_pass_id
  /// The batch's metadata, written as record keys in this order after "gatherer_key" (SGLang's
  /// per-token: input_ids, positions, extend_seq_lens, forward_mode). A per-token record
  /// holds as many tokens as "input_ids" lists (the kept ones' ids, -1 for the rest).
  PtDict metadata;
  PtList misc_objects;  ///< per-token: the record's "misc_objects" (DeepEP's counts)
};

/// SGLang's per-token buffer width (_DetailSinglePassGatherer._TOP_K_NUM): its
/// topk_ids_of_layer has this many columns whatever the model's top-k (-1 beyond it).
inline constexpr std::int64_t kSglangTopkColumns = 8;

/// SGLang's per-pass dump: {"records": [one dict per pass: "forward_pass_id", "rank",
/// "gatherer_key": "primary", "global_physical_count" [L, P] int32],
/// "last_physical_to_logical_map": [L, P] int64}. `snapshot` must be in a pass-based mode.
/// `passes`, when given, names each snapshot pass's forward_pass_id (every pass needs one);
/// otherwise the recorder's pass ids are written.
/// `map_device`: where the engine keeps last_physical_to_logical_map (SGLang: its GPU), written
/// as torch.save writes a storage's location.
PtValue sglang_per_pass_dump(const Snapshot& snapshot, const Placement& last_placement,
                             std::int64_t rank, std::span<const SglangPassRecord> passes = {},
                             Device map_device = Device::cpu());

/// SGLang's per-token dump: records in SGLang's key order, "forward_pass_id", "rank",
/// "gatherer_key", the pass's metadata, "topk_ids_of_layer" [L, n, max(8, top_k)] int32
/// (the physical ids of the pass's n tokens, layer-major, -1 = none),
/// "misc_objects" and "global_physical_count" [L, P] int32 (of those ids); then
/// "last_physical_to_logical_map". With `passes`: one record per entry, in ascending
/// pass_id, n from its input_ids; without: one per pass with kept tokens, n its kept tokens,
/// no metadata and misc_objects []. `snapshot` must be in per_token mode.
PtValue sglang_per_token_dump(const Snapshot& snapshot, const Placement& last_placement,
                              std::int64_t rank, std::span<const SglangPassRecord> passes = {},
                              Device map_device = Device::cpu());

/// The dump that matches the snapshot's mode: stat for stat and stat_approx (the snapshot's
/// logical counts, on `map_device`), per_pass, per_token (`passes` and `map_device` as
/// there); decayed is refused.
PtValue sglang_dump(const Snapshot& snapshot, const Placement& placement, std::int64_t rank,
                    std::span<const SglangPassRecord> passes = {},
                    Device map_device = Device::cpu());

/// Writes sglang_dump(...) into `directory` (sglang_dump_directory() when empty, created if
/// missing) under sglang_dump_name(now, rank), atomically. Returns the path written.
std::filesystem::path write_sglang_dump(const Snapshot& snapshot, const Placement& placement,
                                        std::int64_t rank,
                                        const std::filesystem::path& directory = {},
                                        std::span<const SglangPassRecord> passes = {},
                                        Device map_device = Device::cpu());

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
