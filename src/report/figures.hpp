// Internal: the report's figures built from a recording and its placements' evaluations.
#pragma once

#include <moestat/report.hpp>
#include <string>
#include <vector>

#include "evaluation.hpp"

namespace moestat::report::detail {

/// The colour a placement is drawn with: grey for the identity placement, then a
/// colour-blind-safe palette in the order the placements were given.
std::string colour_of(std::size_t evaluation_index);

/// "" or ", held-out passes 32-63": what the per-placement figures are measured on.
std::string judged_text(const JudgedPasses& judged);

/// Per GPU, its share of the load summed over every layer (sums to 1 where there is load).
std::vector<double> gpu_shares(const Evaluation& evaluation, std::int64_t num_gpus);

/// Runs of layers without load (dense layers): [first, end) each.
std::vector<std::pair<std::int64_t, std::int64_t>> dense_layer_runs(const Recording& recording);

/// The layers x experts heatmap, which draws no placement.
Figure heatmap_figure(const Recording& recording);

/// Every figure, in page order (report.hpp's render_figures).
std::vector<Figure> figures_of(const Recording& recording, const Options& options,
                               const std::vector<Evaluation>& evaluations);

}  // namespace moestat::report::detail
