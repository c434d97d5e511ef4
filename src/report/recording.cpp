// From a file to a Recording, and the checks on recordings and report options.
#include <fmt/format.h>

#include <cmath>
#include <moestat/checked_math.hpp>
#include <moestat/error.hpp>
#include <moestat/io/json.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/record_mode.hpp>
#include <moestat/report.hpp>
#include <variant>

namespace moestat::report {
namespace {

Recording from_snapshot(const Snapshot& snapshot) {
  Recording out;
  out.kind = fmt::format("moestat snapshot ({})", record_mode_name(snapshot.mode));
  out.num_layers = snapshot.num_layers;
  out.num_experts = snapshot.num_logical_experts;
  out.totals = snapshot.logical_totals();
  out.passes = snapshot.logical_counts;  // [W, L, E]; empty outside pass-window modes
  if (!snapshot.decayed_logical_load.empty()) {
    // Decayed mode keeps no counts, only exponentially decayed loads: show those, rounded.
    out.totals.resize(snapshot.decayed_logical_load.size());
    for (std::size_t i = 0; i < out.totals.size(); ++i) {
      out.totals[i] = std::llround(snapshot.decayed_logical_load[i]);
    }
    out.metadata.emplace_back("loads", "decayed sums, rounded");
  }
  auto& meta = out.metadata;
  meta.emplace_back("mode", std::string(record_mode_name(snapshot.mode)));
  meta.emplace_back("top_k", fmt::format("{}", snapshot.top_k));
  meta.emplace_back("physical experts", fmt::format("{}", snapshot.num_physical_experts));
  meta.emplace_back("passes recorded", fmt::format("{}", snapshot.num_passes));
  meta.emplace_back("passes in the window", fmt::format("{}", snapshot.window_size()));
  if (!snapshot.pass_ids.empty()) {
    meta.emplace_back("pass ids",
                      fmt::format("{}..{}", snapshot.pass_ids.front(), snapshot.pass_ids.back()));
  }
  if (!snapshot.placement_versions.empty()) {
    meta.emplace_back("placement versions",
                      fmt::format("{}..{}", snapshot.placement_versions.front(),
                                  snapshot.placement_versions.back()));
  }
  const std::int64_t tokens = checked_sum(snapshot.pass_num_tokens, "the sum of pass_num_tokens");
  if (!snapshot.pass_num_tokens.empty())
    meta.emplace_back("valid tokens", fmt::format("{}", tokens));
  if (snapshot.num_tokens() > 0)
    meta.emplace_back("kept tokens", fmt::format("{}", snapshot.num_tokens()));
  meta.emplace_back("dropped ids", fmt::format("{}", snapshot.dropped_ids));
  if (snapshot.approximate) meta.emplace_back("approximate", "yes (DeepEP normal counts)");
  return out;
}

Recording from_logical_counts(const io::LogicalCounts& counts) {
  Recording out;
  out.kind = "SGLang logical_count";
  out.num_layers = counts.num_layers;
  out.num_experts = counts.num_experts;
  out.totals = counts.totals();
  if (counts.has_window_axis) out.passes = counts.counts;
  out.metadata.emplace_back(
      "shape",
      counts.has_window_axis
          ? fmt::format("[{}][{}][{}] (window, layer, expert)", counts.window_size,
                        counts.num_layers, counts.num_experts)
          : fmt::format("[{}][{}] (layer, expert)", counts.num_layers, counts.num_experts));
  return out;
}

}  // namespace

void Recording::validate() const {
  MOESTAT_CHECK(num_layers > 0 && num_experts > 0,
                "recording: needs at least one layer and one expert, got {} x {}", num_layers,
                num_experts);
  MOESTAT_CHECK(std::int64_t(totals.size()) == num_layers * num_experts,
                "recording: totals hold {} values, expected {} layers x {} experts", totals.size(),
                num_layers, num_experts);
  MOESTAT_CHECK(std::int64_t(passes.size()) % (num_layers * num_experts) == 0,
                "recording: per-pass loads hold {} values, not a multiple of {} x {}",
                passes.size(), num_layers, num_experts);
  for (std::int64_t load : totals) {
    MOESTAT_CHECK(load >= 0, "recording: negative load {}", load);
  }
}

namespace {

Recording load(const std::filesystem::path& path) {
  Recording out;
  if (io::detect_file_format(path) != io::FileFormat::kJson) {
    // .pt (SGLang dumps) and .safetensors hold logical counts (or a placement or a mask,
    // which read_logical_counts refuses by name).
    out = from_logical_counts(io::read_logical_counts(path));
    out.kind =
        fmt::format("logical_count ({})", io::file_format_name(io::detect_file_format(path)));
    out.source = path.string();
    out.validate();
    return out;
  }
  const io::Document document = io::read_document(path);
  if (const auto* snapshot = std::get_if<Snapshot>(&document)) {
    // Drawing allocates [L][E] from the sizes the snapshot declares; only counts it holds
    // are worth that.
    MOESTAT_CHECK(snapshot->window_size() > 0 || snapshot->num_tokens() > 0 ||
                      !snapshot->decayed_logical_load.empty(),
                  "{}: the snapshot holds no counts to draw (mode {}, no pass in its window)",
                  path.string(), record_mode_name(snapshot->mode));
    out = from_snapshot(*snapshot);
  } else if (const auto* counts = std::get_if<io::LogicalCounts>(&document)) {
    out = from_logical_counts(*counts);
  } else {
    MOESTAT_FAIL(
        "{}: is a placement (physical_to_logical_map), not a recording; pass it as "
        "--placement",
        path.string());
  }
  out.source = path.string();
  out.validate();
  return out;
}

}  // namespace

Recording load_recording(const std::filesystem::path& path) {
  // Errors of a summary (a sum that overflows int64) name the file, as the readers' do
  // ("cannot read FILE: ..." and "FILE: ..." name it already).
  try {
    return load(path);
  } catch (const Error& error) {
    if (error.message().find(printable(path.string())) != std::string::npos) throw;
    MOESTAT_FAIL("{}: {}", path.string(), error.message());
  }
}

void Options::validate(const Recording& recording) const {
  MOESTAT_CHECK(num_gpus > 0 && recording.num_experts % num_gpus == 0,
                "--gpus {} must be positive and divide the recording's {} experts", num_gpus,
                recording.num_experts);
  MOESTAT_CHECK(top_experts > 0, "top_experts must be positive, got {}", top_experts);
  if (!placement) return;
  MOESTAT_CHECK(placement->num_layers() == recording.num_layers &&
                    placement->num_logical_experts() == recording.num_experts,
                "the placement has {} layers x {} experts, the recording {} x {}",
                placement->num_layers(), placement->num_logical_experts(), recording.num_layers,
                recording.num_experts);
  MOESTAT_CHECK(placement->num_physical_experts() % num_gpus == 0,
                "--gpus {} must divide the placement's {} physical slots", num_gpus,
                placement->num_physical_experts());
}

}  // namespace moestat::report
