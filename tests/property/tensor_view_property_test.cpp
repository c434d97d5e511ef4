// Property tests: TensorView element reads, numel and contiguity for random shapes and
// strides (up to 4 dims), against a naive reference.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <moestat/tensor_view.hpp>
#include <vector>

namespace moestat {
namespace {

// ---- Naive reference ----

std::int64_t reference_numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t s : shape) n *= s;
  return n;
}

/// Contiguous = empty, or every dimension of size > 1 has its row-major stride.
bool reference_is_contiguous(const std::vector<std::int64_t>& shape,
                             const std::vector<std::int64_t>& strides) {
  if (reference_numel(shape) == 0) return true;
  std::int64_t expected = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] > 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

/// Visits every index of `shape` in row-major order.
template <typename F>
void for_each_index(const std::vector<std::int64_t>& shape, F f) {
  if (reference_numel(shape) == 0) return;
  std::vector<std::int64_t> index(shape.size(), 0);
  while (true) {
    f(index);
    std::size_t axis = shape.size();
    while (axis > 0) {
      --axis;
      if (++index[axis] < shape[axis]) break;
      index[axis] = 0;
      if (axis == 0) return;
    }
    if (shape.empty()) return;
  }
}

std::int64_t read(const TensorView& view, const std::vector<std::int64_t>& i) {
  switch (i.size()) {
    case 0:
      return view.int_at({});
    case 1:
      return view.int_at({i[0]});
    case 2:
      return view.int_at({i[0], i[1]});
    case 3:
      return view.int_at({i[0], i[1], i[2]});
    default:
      return view.int_at({i[0], i[1], i[2], i[3]});
  }
}

RC_GTEST_PROP(TensorViewProperty, ReadsMatchReferenceOffsets, ()) {
  const auto dims = *rc::gen::inRange<std::size_t>(0, 5);
  std::vector<std::int64_t> shape, strides;
  for (std::size_t d = 0; d < dims; ++d) {
    shape.push_back(*rc::gen::inRange<std::int64_t>(0, 5));
    strides.push_back(*rc::gen::inRange<std::int64_t>(0, 30));
  }
  // Sometimes row-major strides, so contiguous views are generated too.
  if (*rc::gen::arbitrary<bool>()) {
    std::int64_t running = 1;
    for (std::size_t d = dims; d-- > 0;) {
      strides[d] = running;
      running *= shape[d] == 0 ? 1 : shape[d];
    }
  }
  std::int64_t span = 1;
  for (std::size_t d = 0; d < dims; ++d) span += (shape[d] > 0 ? shape[d] - 1 : 0) * strides[d];
  const bool int64 = *rc::gen::arbitrary<bool>();
  std::vector<std::int64_t> data64(static_cast<std::size_t>(span));
  std::vector<std::int32_t> data32(static_cast<std::size_t>(span));
  for (std::int64_t i = 0; i < span; ++i) {
    data64[std::size_t(i)] = (i * 2654435761) ^ (std::int64_t(1) << 40);
    data32[std::size_t(i)] = std::int32_t(i * 7919 - 50000);
  }
  const TensorView view = int64 ? TensorView(data64.data(), DType::kInt64, shape, strides)
                                : TensorView(data32.data(), DType::kInt32, shape, strides);
  RC_ASSERT(view.dim() == int(dims));
  RC_ASSERT(view.numel() == reference_numel(shape));
  RC_ASSERT(view.is_contiguous() == reference_is_contiguous(shape, strides));
  for_each_index(shape, [&](const std::vector<std::int64_t>& index) {
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < dims; ++d) offset += index[d] * strides[d];
    const std::int64_t expected =
        int64 ? data64[std::size_t(offset)] : std::int64_t(data32[std::size_t(offset)]);
    RC_ASSERT(read(view, index) == expected);
  });
}

}  // namespace
}  // namespace moestat
