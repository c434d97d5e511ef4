#include "topk_histogram.hpp"

#include <type_traits>

namespace moestat::detail {
namespace {

template <typename Id, bool kTrace>
void count_rows(const Id* ids, std::int64_t row_stride, std::int64_t column_stride,
                std::int64_t num_tokens, std::int64_t num_columns, std::int64_t num_bins,
                std::int64_t* bins, const TraceSink* trace) {
  using Unsigned = std::make_unsigned_t<Id>;
  const auto limit = Unsigned(num_bins);
  for (std::int64_t token = 0; token < num_tokens; ++token) {
    const Id* row = ids + token * row_stride;
    for (std::int64_t column = 0; column < num_columns; ++column) {
      const Id id = row[column * column_stride];
      // One unsigned compare covers both negative and too-large ids; the select keeps the
      // loop free of data-dependent branches.
      const bool in_range = Unsigned(id) < limit;
      const std::int64_t bin = in_range ? std::int64_t(id) : num_bins + (id == Id(-1) ? 1 : 0);
      ++bins[bin];
      if constexpr (kTrace) {
        trace->first[token * trace->token_stride + column] = in_range ? std::int32_t(id) : -1;
      }
    }
  }
}

template <typename Id>
void count_typed(const TensorView& topk_ids, std::int64_t num_tokens, std::int64_t num_bins,
                 std::int64_t* bins, const TraceSink* trace) {
  const auto* ids = static_cast<const Id*>(topk_ids.data());
  const std::int64_t row_stride = topk_ids.stride(0);
  const std::int64_t column_stride = topk_ids.stride(1);
  const std::int64_t num_columns = topk_ids.size(1);
  if (trace != nullptr) {
    count_rows<Id, true>(ids, row_stride, column_stride, num_tokens, num_columns, num_bins, bins,
                         trace);
  } else if (column_stride == 1 && row_stride == num_columns) {
    // Contiguous: one flat pass lets the compiler unroll across token boundaries.
    count_rows<Id, false>(ids, 0, 1, 1, num_tokens * num_columns, num_bins, bins, nullptr);
  } else {
    count_rows<Id, false>(ids, row_stride, column_stride, num_tokens, num_columns, num_bins, bins,
                          nullptr);
  }
}

}  // namespace

void count_topk(const TensorView& topk_ids, std::int64_t num_tokens, std::int64_t num_bins,
                std::int64_t* bins, const TraceSink* trace) {
  if (topk_ids.dtype() == DType::kInt64) {
    count_typed<std::int64_t>(topk_ids, num_tokens, num_bins, bins, trace);
  } else {
    count_typed<std::int32_t>(topk_ids, num_tokens, num_bins, bins, trace);
  }
}

}  // namespace moestat::detail
