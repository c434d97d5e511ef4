// The CPU counting loop (detail::count_topk): bins, the two extra bins, strides and traces.
#include "record/cpu/topk_histogram.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace moestat::detail {
namespace {

// ---- Naive reference ----

/// bins[id] for ids in [0, num_bins), bins[num_bins] for other ids but -1, bins[num_bins + 1]
/// for -1; reads ids[t * row_stride + c * column_stride] for the first num_tokens rows.
template <typename Id>
std::vector<std::int64_t> reference_bins(const std::vector<Id>& ids, std::int64_t row_stride,
                                         std::int64_t column_stride, std::int64_t num_tokens,
                                         std::int64_t num_columns, std::int64_t num_bins) {
  std::vector<std::int64_t> bins(std::size_t(num_bins + 2), 0);
  for (std::int64_t t = 0; t < num_tokens; ++t) {
    for (std::int64_t c = 0; c < num_columns; ++c) {
      const Id id = ids[std::size_t(t * row_stride + c * column_stride)];
      if (id == Id(-1)) {
        ++bins[std::size_t(num_bins + 1)];
      } else if (id >= 0 && std::int64_t(id) < num_bins) {
        ++bins[std::size_t(id)];
      } else {
        ++bins[std::size_t(num_bins)];
      }
    }
  }
  return bins;
}

TEST(TopkHistogram, ContiguousInt32WithEveryKindOfId) {
  const std::int32_t lo = std::numeric_limits<std::int32_t>::min();
  const std::int32_t hi = std::numeric_limits<std::int32_t>::max();
  const std::vector<std::int32_t> ids = {0, 1, 4, 5, -1, -2, lo, hi, 3, 3, 3, -1};
  const TensorView view = TensorView::contiguous(ids.data(), DType::kInt32, {6, 2});
  std::vector<std::int64_t> bins(5 + 2, 0);
  count_topk(view, 6, 5, bins.data(), nullptr);
  EXPECT_EQ(bins, reference_bins(ids, 2, 1, 6, 2, 5));
  EXPECT_EQ(bins, (std::vector<std::int64_t>{1, 1, 0, 3, 1, 4, 2}));
}

TEST(TopkHistogram, Int64IdsBeyondInt32AreOutOfRange) {
  // 2^32 + 1 would alias id 1 if truncated to 32 bits.
  const std::vector<std::int64_t> ids = {(std::int64_t(1) << 32) + 1, 1,
                                         std::numeric_limits<std::int64_t>::min(), -1};
  const TensorView view = TensorView::contiguous(ids.data(), DType::kInt64, {2, 2});
  std::vector<std::int64_t> bins(4 + 2, 0);
  count_topk(view, 2, 4, bins.data(), nullptr);
  EXPECT_EQ(bins, reference_bins(ids, 2, 1, 2, 2, 4));
  EXPECT_EQ(bins, (std::vector<std::int64_t>{0, 1, 0, 0, 2, 1}));
}

TEST(TopkHistogram, OnlyTheFirstTokensCountAndBinsAccumulate) {
  const std::vector<std::int32_t> ids = {0, 0, 1, 1, 2, 2};
  const TensorView view = TensorView::contiguous(ids.data(), DType::kInt32, {3, 2});
  std::vector<std::int64_t> bins(3 + 2, 10);
  count_topk(view, 2, 3, bins.data(), nullptr);
  EXPECT_EQ(bins, (std::vector<std::int64_t>{12, 12, 10, 10, 10}));
  count_topk(view, 0, 3, bins.data(), nullptr);
  EXPECT_EQ(bins, (std::vector<std::int64_t>{12, 12, 10, 10, 10}));
}

TEST(TopkHistogram, StridedViewsReadOnlyTheirElements) {
  // A [4, 6] buffer: the view takes every other column of rows 0..3 (strides {6, 2}).
  std::vector<std::int64_t> buffer(24);
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = std::int64_t(i % 7);
  const std::int64_t shape[] = {4, 3};
  const std::int64_t strides[] = {6, 2};
  const TensorView view(buffer.data(), DType::kInt64, shape, strides);
  std::vector<std::int64_t> bins(7 + 2, 0);
  count_topk(view, 4, 7, bins.data(), nullptr);
  EXPECT_EQ(bins, reference_bins(buffer, 6, 2, 4, 3, 7));

  // The transpose of a [3, 4] int32 buffer (strides {1, 4}).
  std::vector<std::int32_t> narrow(12);
  for (std::size_t i = 0; i < narrow.size(); ++i) narrow[i] = std::int32_t(i) - 1;
  const std::int64_t t_shape[] = {4, 3};
  const std::int64_t t_strides[] = {1, 4};
  const TensorView transposed(narrow.data(), DType::kInt32, t_shape, t_strides);
  std::vector<std::int64_t> t_bins(5 + 2, 0);
  count_topk(transposed, 3, 5, t_bins.data(), nullptr);
  EXPECT_EQ(t_bins, reference_bins(narrow, 1, 4, 3, 3, 5));
}

TEST(TopkHistogram, TraceGetsInRangeIdsAndMinusOneElsewhere) {
  const std::vector<std::int32_t> ids = {0, 7, -1, 2, -5, 3};
  const TensorView view = TensorView::contiguous(ids.data(), DType::kInt32, {3, 2});
  std::vector<std::int64_t> bins(4 + 2, 0);
  // The trace rows are 5 wide; columns 2..4 must stay untouched.
  std::vector<std::int32_t> trace(3 * 5, 42);
  const TraceSink sink{trace.data(), 5};
  count_topk(view, 3, 4, bins.data(), &sink);
  EXPECT_EQ(bins, reference_bins(ids, 2, 1, 3, 2, 4));
  EXPECT_EQ(trace, (std::vector<std::int32_t>{0, -1, 42, 42, 42,  //
                                              -1, 2, 42, 42, 42,  //
                                              -1, 3, 42, 42, 42}));
}

}  // namespace
}  // namespace moestat::detail
