// Reports of a recording: a self-contained HTML page, its figures as standalone SVG (and the
// heatmap as PNG), and the metrics in Prometheus' text exposition format.
//
// Example: which of two plans balances better on the passes after the first 32, which
// they were planned on (`moestat report` does this from the command line):
//
//   namespace report = moestat::report;
//   const report::Recording recording = report::load_recording("demo-out/snapshot.json");
//   const report::Options options{.num_gpus = 32,
//                                 .num_nodes = 4,
//                                 .placements = {{"recorded", recorded}, {"moestat", plan}},
//                                 .held_out_from = 32};
//   for (const auto& [name, balancedness] : report::balancedness(recording, options)) {
//     fmt::print("{}: {:.3f}\n", name, balancedness);  // identity first, then as given
//   }
//   const std::string page = report::render_html(recording, options);
//   for (const report::Figure& figure : report::render_figures(recording, options)) {
//     save(svg_dir / (figure.name + ".svg"), figure.svg);  // as `--svg DIR` writes them
//   }
#pragma once

#include <cstdint>
#include <filesystem>
#include <moestat/counts.hpp>
#include <moestat/placement.hpp>
#include <optional>
#include <string>
#include <string_view>
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

/// A placement the report compares, under the name it is shown with everywhere (legends,
/// tables, the summary, Prometheus' `placement` label).
struct NamedPlacement {
  std::string name;  ///< Non-empty, unique, not "identity"; no quote, backslash or newline.
  Placement placement;
};

struct Options {
  /// Expert-parallel GPUs the experts are spread over; must divide E (and every placement's
  /// physical slots).
  std::int64_t num_gpus = 8;
  /// Nodes the GPUs are grouped into (GPUs g * G / nodes .. on node g); must divide
  /// num_gpus. Per-GPU charts shade each node; the summary names the busiest node.
  std::int64_t num_nodes = 1;
  /// The placements to compare, in this order, beside the identity placement (expert e on
  /// GPU e / (E / num_gpus)), which every report shows as a reference. The summary measures
  /// the best one's gain against the first one given (the placement in use, by convention)
  /// when there are two or more, else against the identity placement.
  std::vector<NamedPlacement> placements = {};
  /// Passes [0, held_out_from) were planned on; when set, every placement is judged on the
  /// later passes only (traffic it has not seen), and charts over time mark the split. Must
  /// lie in [1, passes) of a recording that keeps passes.
  std::optional<std::int64_t> held_out_from = std::nullopt;
  /// Hottest experts listed per layer.
  std::int64_t top_experts = 3;

  /// Throws moestat::Error when the options do not fit the recording.
  void validate(const Recording& recording) const;
};

/// A self-contained HTML page (no network, no script; inline SVG): a summary in words and
/// numbers (best placement and its gain, hottest layer and expert, busiest GPU and node),
/// the recording's metadata, a balancedness table of every placement, and the figures of
/// render_figures, embedded as they are; then a table of the hottest experts per layer.
std::string render_html(const Recording& recording, const Options& options);

/// One chart as a standalone SVG document: axis titles with units, round ticks, a legend.
struct Figure {
  std::string name;   ///< File-name safe: "heatmap", "gpu-load", "pass-balancedness", ...
  std::string title;  ///< As drawn at its top.
  std::string svg;    ///< "<svg ...>...</svg>\n"
};

/// The report's figures, in page order: "heatmap" (layers x experts, log colour scale with
/// its colour bar, every cell a `<rect class="cell">`), "gpu-load" and "gpu-peak-load" (per
/// GPU and placement, nodes shaded), "layer-balancedness" (dense layers marked) and, when
/// the recording keeps two or more passes, "pass-balancedness" (the held-out split marked).
std::vector<Figure> render_figures(const Recording& recording, const Options& options);

/// The heatmap figure as PNG bytes, rasterised from its SVG (librsvg and Cairo) at `scale`
/// times its size in SVG units (0.25 to 8).
std::vector<std::uint8_t> render_heatmap_png(const Recording& recording, double scale = 1.0);

/// Any SVG document (a Figure's, say) as PNG bytes at `scale` times its size; a white
/// background where the SVG draws none. moestat::Error when the SVG does not parse.
std::vector<std::uint8_t> svg_to_png(std::string_view svg, double scale = 1.0);

/// Balancedness (mean over layers with load of mean / max GPU load), on the held-out passes
/// when options.held_out_from is set: the identity placement first, then options.placements
/// in order; the figures the report shows.
struct PlacementBalancedness {
  std::string name;
  double balancedness = 1.0;
};
std::vector<PlacementBalancedness> balancedness(const Recording& recording, const Options& options);

/// Prometheus text exposition (version 0.0.4) of the recording's metrics, one gauge family
/// each with HELP and TYPE lines:
///   moestat_expert_load{layer="3",expert="17"}             assignments, loaded layers only
///   moestat_gpu_load{layer="3",gpu="0",placement="identity"}  assignments per GPU
///   moestat_layer_balancedness{layer="3",placement="identity"}  mean / max GPU load
///   moestat_balancedness{placement="identity"}             mean over loaded layers
///   moestat_recorded_passes                                passes in the recording
/// with one series per placement of options.placements too, labelled with its name. The
/// figures are of the whole recording (held_out_from does not apply).
std::string prometheus_text(const Recording& recording, const Options& options);

}  // namespace moestat::report
