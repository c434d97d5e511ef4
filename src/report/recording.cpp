// From a file to a Recording, and the checks on recordings and report options.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <moestat/checked_math.hpp>
#include <moestat/error.hpp>
#include <moestat/io/document.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/printable.hpp>
#include <moestat/record_mode.hpp>
#include <moestat/report.hpp>
#include <set>
#include <string_view>
#include <variant>

#include "evaluation.hpp"

namespace moestat::report {
namespace {

/// One row over the whole recording, for a snapshot that keeps no pass window.
CountWindow summary_row(const Snapshot& snapshot, std::vector<std::int64_t> totals) {
  return {.window_size = 1,
          .num_layers = snapshot.num_layers,
          .num_experts = snapshot.num_logical_experts,
          .has_window_axis = false,
          .counts = std::move(totals)};
}

Recording from_snapshot(const Snapshot& snapshot) {
  Recording out;
  out.kind = fmt::format("moestat snapshot ({})", record_mode_name(snapshot.mode));
  if (snapshot.window_size() > 0) {
    out.counts = count_window_of(snapshot);
  } else if (!snapshot.decayed_logical_load.empty()) {
    // Decayed mode keeps no counts, only exponentially decayed loads: show those, rounded.
    std::vector<std::int64_t> rounded(snapshot.decayed_logical_load.size());
    for (std::size_t i = 0; i < rounded.size(); ++i) {
      rounded[i] = std::llround(snapshot.decayed_logical_load[i]);
    }
    out.counts = summary_row(snapshot, std::move(rounded));
    out.metadata.emplace_back("loads", "decayed sums, rounded");
  } else {
    out.counts = summary_row(snapshot, snapshot.logical_totals());  // kept tokens tallied
  }
  auto& meta = out.metadata;
  meta.emplace_back("mode", std::string(record_mode_name(snapshot.mode)));
  meta.emplace_back("top_k", fmt::format("{}", snapshot.top_k));
  meta.emplace_back("physical experts", fmt::format("{}", snapshot.num_physical_experts));
  meta.emplace_back("passes recorded", fmt::format("{}", snapshot.num_passes));
  meta.emplace_back("passes in the window", fmt::format("{}", snapshot.window_size()));
  if (!snapshot.pass_ids.empty()) {
    meta.emplace_back("pass ids",
                      fmt::format("{} to {}", snapshot.pass_ids.front(), snapshot.pass_ids.back()));
  }
  if (!snapshot.placement_versions.empty()) {
    const auto [lowest, highest] =
        std::minmax_element(snapshot.placement_versions.begin(), snapshot.placement_versions.end());
    meta.emplace_back("placement version",
                      *lowest == *highest
                          ? fmt::format("{} (one placement over the whole window)", *lowest)
                          : fmt::format("{} to {} (the engine changed placement during the "
                                        "window)",
                                        *lowest, *highest));
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

Recording from_counts(CountWindow counts, std::string kind) {
  Recording out;
  out.kind = std::move(kind);
  out.metadata.emplace_back(
      "shape",
      counts.has_window_axis
          ? fmt::format("[{}][{}][{}] (window, layer, expert)", counts.window_size,
                        counts.num_layers, counts.num_experts)
          : fmt::format("[{}][{}] (layer, expert)", counts.num_layers, counts.num_experts));
  out.counts = std::move(counts);
  return out;
}

Recording load(const std::filesystem::path& path) {
  const io::DetectedFile file = io::read_detected_file(path);  // read once, for every reader
  if (file.format == io::FileFormat::kJson) {
    // A snapshot says more than its counts (mode, top_k, tokens) and may keep counts outside
    // a pass window, which read_counts does not take.
    const io::Document document = io::read_document(file);
    if (const auto* snapshot = std::get_if<Snapshot>(&document)) {
      // Drawing allocates [L][E] from the sizes the snapshot declares; only counts it holds
      // are worth that.
      MOESTAT_CHECK(snapshot->window_size() > 0 || snapshot->num_tokens() > 0 ||
                        !snapshot->decayed_logical_load.empty(),
                    "the snapshot holds no counts to draw (mode {}, no pass in its window)",
                    record_mode_name(snapshot->mode));
      return from_snapshot(*snapshot);
    }
    MOESTAT_CHECK(io::document_kind(document) != io::DocumentKind::kPlacement,
                  "is a placement (physical_to_logical_map), not a recording");
    return from_counts(io::read_counts(file), "SGLang logical_count");
  }
  // .pt (SGLang dumps) and .safetensors hold counts (or a placement or a mask, which
  // read_counts refuses by name).
  return from_counts(io::read_counts(file),
                     fmt::format("logical_count ({})", io::file_format_name(file.format)));
}

}  // namespace

void Recording::validate() const {
  counts.validate("recording");
  counts.require_whole_counts("recording");
}

Recording load_recording(const std::filesystem::path& path) {
  // Errors of a summary (a sum that overflows int64) name the file, as the readers' do
  // ("cannot read FILE: ..." and "FILE: ..." name it already).
  try {
    Recording out = load(path);
    out.source = path.string();
    out.validate();
    return out;
  } catch (const Error& error) {
    if (error.message().find(printable(path.string())) != std::string::npos) throw;
    throw error.with_context(path.string());
  }
}

void Options::validate(const Recording& recording) const {
  MOESTAT_CHECK(num_gpus > 0 && recording.num_experts() % num_gpus == 0,
                "the GPU count ({}) must be positive and divide the recording's {} experts",
                num_gpus, recording.num_experts());
  MOESTAT_CHECK(num_nodes > 0 && num_gpus % num_nodes == 0,
                "the node count ({}) must be positive and divide the GPU count ({})", num_nodes,
                num_gpus);
  MOESTAT_CHECK(top_experts > 0, "top_experts must be positive, got {}", top_experts);
  if (held_out_from) {
    MOESTAT_CHECK(*held_out_from >= 1 && *held_out_from < recording.num_passes(),
                  "the first held-out pass ({}) must leave passes on both sides of the split; "
                  "the recording keeps {} passes",
                  *held_out_from, recording.num_passes());
  }
  std::set<std::string_view> names{detail::kIdentityName};
  for (const auto& [name, placement] : placements) {
    // Names are escaped where they are shown: HTML, SVG and Prometheus label values.
    MOESTAT_CHECK(!name.empty(), "a placement's name must be non-empty");
    MOESTAT_CHECK(names.insert(name).second, "two placements are named {}{}", printable(name),
                  name == detail::kIdentityName ? " (the reference placement's name)" : "");
    MOESTAT_CHECK(placement.num_layers() == recording.num_layers() &&
                      placement.num_logical_experts() == recording.num_experts(),
                  "placement {} has {} layers x {} experts, the recording {} x {}", name,
                  placement.num_layers(), placement.num_logical_experts(), recording.num_layers(),
                  recording.num_experts());
    MOESTAT_CHECK(placement.num_physical_experts() % num_gpus == 0,
                  "the GPU count ({}) must divide placement {}'s {} physical slots", num_gpus, name,
                  placement.num_physical_experts());
  }
}

}  // namespace moestat::report
