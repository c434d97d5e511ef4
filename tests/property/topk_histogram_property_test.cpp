// Property test: the CPU counting loop (detail::count_topk) on random ids, dtypes, strides
// and sizes up to a few hundred tokens (past the unrolled path's remainder), with and
// without a trace, against a naive histogram.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "record/cpu/topk_histogram.hpp"

namespace moestat::detail {
namespace {

// ---- Naive reference ----

struct ReferenceCount {
  std::vector<std::int64_t> bins;   ///< [num_bins + 2]: ids, then dropped, then -1
  std::vector<std::int32_t> trace;  ///< [tokens, columns], -1 unless counted
};

ReferenceCount reference_count(const std::vector<std::vector<std::int64_t>>& rows,
                               std::int64_t num_tokens, std::int64_t num_bins) {
  ReferenceCount out;
  out.bins.assign(std::size_t(num_bins + 2), 0);
  for (std::int64_t t = 0; t < num_tokens; ++t) {
    for (std::int64_t id : rows[std::size_t(t)]) {
      if (id >= 0 && id < num_bins) {
        ++out.bins[std::size_t(id)];
        out.trace.push_back(std::int32_t(id));
      } else {
        ++out.bins[std::size_t(id == -1 ? num_bins + 1 : num_bins)];
        out.trace.push_back(-1);
      }
    }
  }
  return out;
}

RC_GTEST_PROP(TopkHistogramProperty, MatchesNaiveHistogram, ()) {
  const auto num_bins = *rc::gen::inRange<std::int64_t>(1, 300);
  const auto rows = *rc::gen::inRange<std::int64_t>(0, 300);
  const auto columns = *rc::gen::inRange<std::int64_t>(1, 11);
  const auto num_tokens = *rc::gen::inRange<std::int64_t>(0, rows + 1);
  const bool int64 = *rc::gen::arbitrary<bool>();
  const bool with_trace = *rc::gen::arbitrary<bool>();
  // Row padding and column spacing of the buffer (1 and 0: contiguous).
  const auto column_stride = *rc::gen::inRange<std::int64_t>(1, 3);
  const auto row_padding = *rc::gen::inRange<std::int64_t>(0, 2);
  const std::int64_t row_stride = columns * column_stride + row_padding;

  std::vector<std::vector<std::int64_t>> values(static_cast<std::size_t>(rows));
  for (auto& row : values) {
    for (std::int64_t c = 0; c < columns; ++c) {
      const int kind = *rc::gen::inRange(0, 10);
      std::int64_t id = *rc::gen::inRange<std::int64_t>(0, num_bins);
      if (kind == 0) id = -1;
      if (kind == 1) id = num_bins + *rc::gen::inRange<std::int64_t>(0, 3);
      if (kind == 2) id = int64 ? std::numeric_limits<std::int64_t>::min() + 5 : -100;
      if (kind == 3 && int64) id = (std::int64_t(1) << 32) + id;  // aliases id mod 2^32
      row.push_back(id);
    }
  }
  // Unused buffer elements hold id 0 so that reading them would change bin 0.
  std::vector<std::int64_t> buffer64(std::size_t(rows * row_stride), 0);
  std::vector<std::int32_t> buffer32(std::size_t(rows * row_stride), 0);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < columns; ++c) {
      const auto at = std::size_t(r * row_stride + c * column_stride);
      buffer64[at] = values[std::size_t(r)][std::size_t(c)];
      buffer32[at] = std::int32_t(values[std::size_t(r)][std::size_t(c)]);
    }
  }
  const std::int64_t shape[] = {rows, columns};
  const std::int64_t strides[] = {row_stride, column_stride};
  const TensorView view = int64 ? TensorView(buffer64.data(), DType::kInt64, shape, strides)
                                : TensorView(buffer32.data(), DType::kInt32, shape, strides);

  const ReferenceCount expected = reference_count(values, num_tokens, num_bins);
  // Bins start non-zero: count_topk adds to them.
  std::vector<std::int64_t> bins(std::size_t(num_bins + 2), 3);
  std::vector<std::int64_t> expected_bins = expected.bins;
  for (auto& bin : expected_bins) bin += 3;
  // The trace is wider than the ids (as a [tokens, L, k] trace row is); the rest stays 77.
  const std::int64_t trace_stride = columns + 2;
  std::vector<std::int32_t> trace(std::size_t(num_tokens * trace_stride), 77);
  const TraceSink sink{trace.data(), trace_stride};
  count_topk(view, num_tokens, num_bins, bins.data(), with_trace ? &sink : nullptr);
  RC_ASSERT(bins == expected_bins);
  if (with_trace) {
    for (std::int64_t t = 0; t < num_tokens; ++t) {
      for (std::int64_t c = 0; c < trace_stride; ++c) {
        const std::int32_t want =
            c < columns ? expected.trace[std::size_t(t * columns + c)] : std::int32_t(77);
        RC_ASSERT(trace[std::size_t(t * trace_stride + c)] == want);
      }
    }
  }
}

}  // namespace
}  // namespace moestat::detail
