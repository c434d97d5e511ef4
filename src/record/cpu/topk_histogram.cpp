#include "topk_histogram.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

// Speed notes (bench/cpu_record_bench.cpp, docs/BENCHMARKS.md): the loop is bound by its
// memory operations (read the id, read-modify-write its bin). A well-predicted branch per id
// plus unrolling by one DeepSeek token (8 ids) brings it to about three instructions per id.
// Padding and out-of-range ids leave the unrolled path and are tallied in registers, so runs
// of -1 rows do not chain every increment through one bin in memory. Four interleaved
// sub-histograms were measured too: no gain on realistic skewed ids (top-k ids of a token
// are distinct, so the same bin rarely repeats within the store-forwarding window), so the
// loop writes `bins` directly and needs no scratch.

namespace moestat::detail {
namespace {

/// Ids that miss [0, num_bins), counted in registers and added to the two extra bins once.
struct OutOfRange {
  std::int64_t dropped = 0;
  std::int64_t padding = 0;
};

template <typename Id>
using Unsigned = std::make_unsigned_t<Id>;

/// One unsigned compare covers negative and too-large ids. `limit` never exceeds the largest
/// Id + 1, so a huge num_bins cannot wrap around in the narrower id type.
template <typename Id>
Unsigned<Id> limit_of(std::int64_t num_bins) {
  constexpr auto kIdRange = std::uint64_t(std::numeric_limits<Id>::max()) + 1;
  return Unsigned<Id>(std::min(std::uint64_t(num_bins), kIdRange));
}

/// Counts one id; returns what the trace records for it (-1 unless it is counted).
template <typename Id>
inline std::int32_t count_one(Id id, Unsigned<Id> limit, std::int64_t* bins, OutOfRange& out) {
  if (Unsigned<Id>(id) < limit) [[likely]] {
    ++bins[Unsigned<Id>(id)];
    return std::int32_t(id);
  }
  if (id == Id(-1)) {
    ++out.padding;
  } else {
    ++out.dropped;
  }
  return -1;
}

/// Contiguous ids without a trace: one flat run across token boundaries.
template <typename Id>
void count_flat(const Id* ids, std::int64_t num_ids, Unsigned<Id> limit, std::int64_t* bins,
                OutOfRange& out) {
  constexpr std::int64_t kUnroll = 8;
  std::int64_t i = 0;
  for (; i + kUnroll <= num_ids; i += kUnroll) {
#pragma GCC unroll 8
    for (std::int64_t j = 0; j < kUnroll; ++j) count_one(ids[i + j], limit, bins, out);
  }
  for (; i < num_ids; ++i) count_one(ids[i], limit, bins, out);
}

/// Any strides; with a trace, token t's ids also go to trace->first[t * token_stride + column].
template <typename Id, bool kTrace>
void count_rows(const Id* ids, std::int64_t row_stride, std::int64_t column_stride,
                std::int64_t num_tokens, std::int64_t num_columns, Unsigned<Id> limit,
                std::int64_t* bins, const TraceSink* trace, OutOfRange& out) {
  for (std::int64_t token = 0; token < num_tokens; ++token) {
    const Id* row = ids + token * row_stride;
    std::int32_t* trace_row = nullptr;
    if constexpr (kTrace) trace_row = trace->first + token * trace->token_stride;
    for (std::int64_t column = 0; column < num_columns; ++column) {
      const std::int32_t traced = count_one(row[column * column_stride], limit, bins, out);
      if constexpr (kTrace) trace_row[column] = traced;
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
  const Unsigned<Id> limit = limit_of<Id>(num_bins);
  OutOfRange out;
  if (trace != nullptr) {
    count_rows<Id, true>(ids, row_stride, column_stride, num_tokens, num_columns, limit, bins,
                         trace, out);
  } else if (column_stride == 1 && row_stride == num_columns) {
    count_flat(ids, num_tokens * num_columns, limit, bins, out);
  } else {
    count_rows<Id, false>(ids, row_stride, column_stride, num_tokens, num_columns, limit, bins,
                          nullptr, out);
  }
  bins[num_bins] += out.dropped;
  bins[num_bins + 1] += out.padding;
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
