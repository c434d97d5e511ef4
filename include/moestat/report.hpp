// Reports of a recording: a self-contained HTML page, the heatmap as a PNG, and the metrics
// in Prometheus' text exposition format.
#pragma once

#include <cstdint>
#include <filesystem>
#include <moestat/counts.hpp>
#include <moestat/placement.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace moestat::report {

/// What a report draws: a recording's counts and what it says about its source.
struct Recording {
  std::string source;  ///< Where it came from (a path), shown in the report.
  std::string kind;    ///< "moestat snapshot (stat)", "SGLang logical_count", ...
  /// Whole token assignments: per pass where the source keeps a window (has_window_axis),
  /// else one row over the whole recording (an [L][E] file, a per_token snapshot's kept
  /// tokens, a decayed snapshot's loads rounded).
  CountWindow counts;
  /// Facts shown in the metadata table, in order ("top_k", "8").
  std::vector<std::pair<std::string, std::string>> metadata;

  std::int64_t num_layers() const noexcept { return counts.num_layers; }
  std::int64_t num_experts() const noexcept { return counts.num_experts; }
  /// Passes with their own loads: the window's, 0 when the source keeps none.
  std::int64_t num_passes() const noexcept {
    return counts.has_window_axis ? counts.window_size : 0;
  }
  /// Throws moestat::Error naming the inconsistent field.
  void validate() const;
};

/// Reads a recording file through io::read_counts: a moestat snapshot, SGLang's
/// `{"logical_count": ...}` or fiddler's `{"expert_popularity": ...}` JSON, an SGLang `.pt`
/// dump (stat, per-pass or per-token) or a `.safetensors` file with a `logical_count`
/// tensor (the format detected from the contents); per_token and decayed snapshots too.
/// moestat::Error starting with the path when the file is missing, malformed or not a
/// recording (a placement, say).
Recording load_recording(const std::filesystem::path& path);

struct Options {
  /// Expert-parallel GPUs the experts are spread over; must divide E (and the placement's
  /// physical slots).
  std::int64_t num_gpus = 8;
  /// The placement to compare with the identity placement (expert e on GPU e / (E / gpus));
  /// none: the report shows the identity placement only.
  std::optional<Placement> placement = std::nullopt;
  /// Hottest experts listed per layer.
  std::int64_t top_experts = 3;

  /// Throws moestat::Error when the options do not fit the recording.
  void validate(const Recording& recording) const;
};

/// A self-contained HTML page (no network, no script; inline SVG): the recording's metadata,
/// a layers x experts heatmap (log colour scale, the hottest expert of each layer marked;
/// every cell a `<rect class="cell">`), per-GPU load bars and per-layer balancedness for the
/// identity placement and `options.placement`, balancedness per pass when the recording
/// has passes, and a table of the hottest experts per layer.
std::string render_html(const Recording& recording, const Options& options);

/// The heatmap alone as PNG bytes: one cell per (layer, expert), `cell_width` x
/// `cell_height` pixels, colours as in the HTML.
std::vector<std::uint8_t> render_heatmap_png(const Recording& recording, int cell_width = 4,
                                             int cell_height = 8);

/// Balancedness (mean over layers with load of mean / max GPU load) of the identity
/// placement and, when set, of options.placement: the figures the report shows.
struct Balancedness {
  double identity = 1.0;
  std::optional<double> planned = std::nullopt;
};
Balancedness balancedness(const Recording& recording, const Options& options);

/// Prometheus text exposition (version 0.0.4) of the recording's metrics, one gauge family
/// each with HELP and TYPE lines:
///   moestat_expert_load{layer="3",expert="17"}             assignments, loaded layers only
///   moestat_gpu_load{layer="3",gpu="0",placement="identity"}  assignments per GPU
///   moestat_layer_balancedness{layer="3",placement="identity"}  mean / max GPU load
///   moestat_balancedness{placement="identity"}             mean over loaded layers
///   moestat_recorded_passes                                passes in the recording
/// with placement="planned" series too when options.placement is set.
std::string prometheus_text(const Recording& recording, const Options& options);

}  // namespace moestat::report
