// SGLang's expert-distribution dumps: names, directory and the dicts of each mode.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <moestat/error.hpp>
#include <moestat/io/sglang.hpp>
#include <moestat/io/snapshot_json.hpp>

#include "codec.hpp"

namespace moestat::io {
namespace {

constexpr std::string_view kGathererKey = "primary";  // SGLang's only gatherer without TBO

void require_same_topology(const Snapshot& snapshot, const Placement& placement) {
  MOESTAT_CHECK(placement.num_layers() == snapshot.num_layers &&
                    placement.num_physical_experts() == snapshot.num_physical_experts,
                "the placement ({} layers x {} slots) does not match the snapshot ({} x {})",
                placement.num_layers(), placement.num_physical_experts(), snapshot.num_layers,
                snapshot.num_physical_experts);
}

PtDict record_head(std::int64_t forward_pass_id, std::int64_t rank) {
  return {{PtValue("forward_pass_id"), PtValue(forward_pass_id)},
          {PtValue("rank"), PtValue(rank)},
          {PtValue("gatherer_key"), PtValue(std::string(kGathererKey))}};
}

/// The engine's record of pass `pass_id` among `passes`; moestat::Error when it has none.
const SglangPassRecord& record_of(std::span<const SglangPassRecord> passes, std::int64_t pass_id) {
  const auto found = std::find_if(passes.begin(), passes.end(),
                                  [&](const SglangPassRecord& r) { return r.pass_id == pass_id; });
  MOESTAT_CHECK(found != passes.end(), "SGLang dump: no record of the engine's for pass {}",
                pass_id);
  return *found;
}

/// The tokens of a per-token record: as many as the metadata's input_ids, else `kept`.
std::int64_t record_tokens(const PtDict& metadata, std::int64_t kept) {
  for (const auto& [key, value] : metadata) {
    if (key.kind() == PtValue::Kind::kStr && key.as_str() == "input_ids") {
      return std::int64_t(value.list().size());
    }
  }
  return kept;
}

/// A per-token record in SGLang's key order: the pass's first `tokens` tokens, those of the
/// `kept` from snapshot row `first` on, the rest -1.
PtDict token_record(const Snapshot& snapshot, std::int64_t rank, std::int64_t forward_pass_id,
                    std::int64_t first, std::int64_t kept, std::int64_t tokens, PtDict metadata,
                    PtList misc_objects) {
  const std::int64_t layers = snapshot.num_layers;
  const std::int64_t top_k = snapshot.top_k;
  const std::int64_t slots = snapshot.num_physical_experts;
  const std::int64_t columns = std::max(kSglangTopkColumns, top_k);
  // SGLang keeps ids layer-major: topk_ids_of_layer[layer][token][k].
  std::vector<std::int32_t> ids(std::size_t(layers * tokens * columns), -1);
  std::vector<std::int64_t> physical(std::size_t(layers * slots), 0);
  for (std::int64_t t = 0; t < std::min(kept, tokens); ++t) {
    for (std::int64_t l = 0; l < layers; ++l) {
      for (std::int64_t k = 0; k < top_k; ++k) {
        const std::int32_t id =
            snapshot.token_physical_ids[std::size_t(((first + t) * layers + l) * top_k + k)];
        ids[std::size_t((l * tokens + t) * columns + k)] = id;
        if (id >= 0) ++physical[std::size_t(l * slots + id)];
      }
    }
  }
  PtDict entry = record_head(forward_pass_id, rank);
  for (auto& item : metadata) entry.push_back(std::move(item));
  entry.emplace_back(PtValue("topk_ids_of_layer"),
                     PtValue(HostTensor::of<std::int32_t>({layers, tokens, columns}, ids)));
  entry.emplace_back(PtValue("misc_objects"), PtValue(std::move(misc_objects)));
  entry.emplace_back(PtValue("global_physical_count"),
                     PtValue(detail::count_tensor({layers, slots}, physical)));
  return entry;
}

PtValue dump_of(PtList records, const Placement& placement, Device map_device) {
  HostTensor map = detail::physical_to_logical_tensor(placement);
  map.device = map_device;
  return PtValue(PtDict{{PtValue("records"), PtValue(std::move(records))},
                        {PtValue("last_physical_to_logical_map"), PtValue(std::move(map))}});
}

}  // namespace

std::filesystem::path sglang_dump_directory() {
  const char* directory = std::getenv("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR");
  return directory != nullptr && *directory != '\0' ? directory : "/tmp";
}

std::string sglang_dump_name(double unix_time, std::optional<std::int64_t> rank) {
  // Python prints a float with at least one decimal ("1730000000.0"); fmt drops ".0".
  std::string time = fmt::format("{}", unix_time);
  if (time.find_first_of(".en") == std::string::npos) time += ".0";
  return rank ? fmt::format("expert_distribution_recorder_{}_{}.pt", time, *rank)
              : fmt::format("expert_distribution_recorder_{}.pt", time);
}

PtDict detail::stat_dump(HostTensor logical_count, std::int64_t rank,
                         std::optional<double> average_utilization) {
  return PtDict{{PtValue("rank"), PtValue(rank)},
                {PtValue("logical_count"), PtValue(std::move(logical_count))},
                {PtValue("average_utilization_rate_over_window"),
                 average_utilization ? PtValue(*average_utilization) : PtValue()}};
}

PtValue sglang_stat_dump(const CountWindow& counts, std::int64_t rank,
                         std::optional<double> average_utilization) {
  return sglang_stat_dump(detail::logical_count_tensor(counts), rank, average_utilization);
}

PtValue sglang_stat_dump(HostTensor logical_count, std::int64_t rank,
                         std::optional<double> average_utilization,
                         std::optional<std::vector<float>> pass_balancedness) {
  MOESTAT_CHECK(logical_count.shape.size() == 2 || logical_count.shape.size() == 3,
                "logical_count: expected [layers, experts] or [passes, layers, experts], got {} "
                "axes",
                logical_count.shape.size());
  MOESTAT_CHECK(logical_count.dtype == DType::kInt32 || logical_count.dtype == DType::kInt64,
                "logical_count: expected int32 or int64 counts, got {}",
                dtype_name(logical_count.dtype));
  // An engine's int32 buffer as it is; int64 narrowed where it fits, as SGLang's int32.
  HostTensor written = logical_count.dtype == DType::kInt32
                           ? std::move(logical_count)
                           : detail::count_tensor(logical_count.shape, logical_count.to_int64());
  written.device = logical_count.device;
  PtDict dump = detail::stat_dump(std::move(written), rank, average_utilization);
  if (pass_balancedness) {
    const auto passes = std::int64_t(pass_balancedness->size());
    dump.emplace_back(
        PtValue("eplb_balancedness"),
        PtValue(HostTensor::of<float>({passes}, std::span<const float>(*pass_balancedness))));
  }
  return PtValue(std::move(dump));
}

PtValue sglang_per_pass_dump(const Snapshot& snapshot, const Placement& last_placement,
                             std::int64_t rank, std::span<const SglangPassRecord> passes,
                             Device map_device) {
  validate_snapshot(snapshot);
  require_same_topology(snapshot, last_placement);
  MOESTAT_CHECK(snapshot.mode != RecordMode::kPerToken && snapshot.mode != RecordMode::kDecayed,
                "a per-pass dump needs a pass window; the snapshot is in {} mode",
                record_mode_name(snapshot.mode));
  const std::int64_t slice = snapshot.num_layers * snapshot.num_physical_experts;
  PtList records;
  for (std::int64_t pass = 0; pass < snapshot.window_size(); ++pass) {
    const std::int64_t pass_id = snapshot.pass_ids[std::size_t(pass)];
    const std::span<const std::int64_t> counts(snapshot.physical_counts.data() + pass * slice,
                                               std::size_t(slice));
    PtDict entry =
        record_head(passes.empty() ? pass_id : record_of(passes, pass_id).forward_pass_id, rank);
    entry.emplace_back(PtValue("global_physical_count"),
                       PtValue(detail::count_tensor(
                           {snapshot.num_layers, snapshot.num_physical_experts}, counts)));
    records.emplace_back(std::move(entry));
  }
  return dump_of(std::move(records), last_placement, map_device);
}

PtValue sglang_per_token_dump(const Snapshot& snapshot, const Placement& last_placement,
                              std::int64_t rank, std::span<const SglangPassRecord> passes,
                              Device map_device) {
  validate_snapshot(snapshot);
  require_same_topology(snapshot, last_placement);
  MOESTAT_CHECK(snapshot.mode == RecordMode::kPerToken,
                "a per-token dump needs a per_token snapshot, not {}",
                record_mode_name(snapshot.mode));
  // Kept tokens come in recording order, so each pass's tokens are consecutive and ascending.
  const auto& token_passes = snapshot.token_pass_ids;
  PtList records;
  if (passes.empty()) {
    for (auto first = token_passes.begin(); first != token_passes.end();) {
      const auto end = std::upper_bound(first, token_passes.end(), *first);
      const auto kept = std::int64_t(end - first);
      records.emplace_back(
          token_record(snapshot, rank, *first, first - token_passes.begin(), kept, kept, {}, {}));
      first = end;
    }
    return dump_of(std::move(records), last_placement, map_device);
  }
  std::vector<const SglangPassRecord*> in_order;
  for (const SglangPassRecord& pass : passes) in_order.push_back(&pass);
  std::sort(in_order.begin(), in_order.end(),
            [](const auto* a, const auto* b) { return a->pass_id < b->pass_id; });
  for (const SglangPassRecord* pass : in_order) {
    const auto [first, end] =
        std::equal_range(token_passes.begin(), token_passes.end(), pass->pass_id);
    const auto kept = std::int64_t(end - first);
    records.emplace_back(
        token_record(snapshot, rank, pass->forward_pass_id, first - token_passes.begin(), kept,
                     record_tokens(pass->metadata, kept), pass->metadata, pass->misc_objects));
  }
  return dump_of(std::move(records), last_placement, map_device);
}

PtValue sglang_dump(const Snapshot& snapshot, const Placement& placement, std::int64_t rank,
                    std::span<const SglangPassRecord> passes, Device map_device) {
  switch (snapshot.mode) {
    case RecordMode::kStat:
    case RecordMode::kStatApprox: {
      require_same_topology(snapshot, placement);
      HostTensor logical_count = detail::logical_count_tensor(count_window_of(snapshot));
      logical_count.device = map_device;
      return sglang_stat_dump(std::move(logical_count), rank, {});
    }
    case RecordMode::kPerPass:
      return sglang_per_pass_dump(snapshot, placement, rank, passes, map_device);
    case RecordMode::kPerToken:
      return sglang_per_token_dump(snapshot, placement, rank, passes, map_device);
    case RecordMode::kDecayed:
      break;
  }
  MOESTAT_FAIL("SGLang has no dump for decayed loads; write a moestat snapshot instead");
}

std::filesystem::path write_sglang_dump(const Snapshot& snapshot, const Placement& placement,
                                        std::int64_t rank, const std::filesystem::path& directory,
                                        std::span<const SglangPassRecord> passes,
                                        Device map_device) {
  PtValue dump = sglang_dump(snapshot, placement, rank, passes, map_device);
  const std::filesystem::path folder = directory.empty() ? sglang_dump_directory() : directory;
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  MOESTAT_CHECK(!error, "cannot create {}: {}", folder.string(), error.message());
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const bool per_rank =
      snapshot.mode == RecordMode::kPerPass || snapshot.mode == RecordMode::kPerToken;
  const std::filesystem::path path =
      folder / (per_rank ? sglang_dump_name(now, rank) : sglang_dump_name(now));
  write_pt_file(path, dump);
  return path;
}

}  // namespace moestat::io
