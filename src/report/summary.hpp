// Internal: the top of the report page: what the recording says, in words and numbers, and
// the table of placements it compares.
#pragma once

#include <moestat/report.hpp>
#include <string>
#include <vector>

#include "evaluation.hpp"

namespace moestat::report::detail {

/// Appends the "What this says" section and the placements table as HTML.
void write_summary(std::string& out, const Recording& recording, const Options& options,
                   const std::vector<Evaluation>& evaluations);

}  // namespace moestat::report::detail
