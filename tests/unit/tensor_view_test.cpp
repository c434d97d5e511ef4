// TensorView: construction checks, shape queries, contiguity and checked element reads.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <limits>
#include <moestat/tensor_view.hpp>
#include <vector>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

// ---- Naive reference ----

/// Element offset of `index` under `strides`: sum of index[i] * strides[i].
std::int64_t reference_offset(const std::vector<std::int64_t>& index,
                              const std::vector<std::int64_t>& strides) {
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < index.size(); ++i) offset += index[i] * strides[i];
  return offset;
}

/// Row-major strides of `shape` (size-0 dims counted as 1, as torch does).
std::vector<std::int64_t> reference_row_major(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> strides(shape.size());
  std::int64_t running = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = running;
    running *= shape[i] == 0 ? 1 : shape[i];
  }
  return strides;
}

TensorView make(const void* data, DType dtype, const std::vector<std::int64_t>& shape,
                const std::vector<std::int64_t>& strides, Device device = Device::cpu()) {
  return TensorView(data, dtype, shape, strides, device);
}

// ---- dtypes ----

TEST(TensorView, DTypeNamesAndSizes) {
  EXPECT_EQ(dtype_name(DType::kInt32), "int32");
  EXPECT_EQ(dtype_name(DType::kInt64), "int64");
  EXPECT_EQ(dtype_name(DType::kFloat32), "float32");
  EXPECT_EQ(dtype_name(DType::kFloat64), "float64");
  EXPECT_EQ(dtype_name(DType::kBool), "bool");
  EXPECT_EQ(dtype_size(DType::kInt32), 4u);
  EXPECT_EQ(dtype_size(DType::kInt64), 8u);
  EXPECT_EQ(dtype_size(DType::kFloat32), 4u);
  EXPECT_EQ(dtype_size(DType::kFloat64), 8u);
  EXPECT_EQ(dtype_size(DType::kBool), 1u);
}

TEST(TensorView, NarrowIntegerDTypesReadAsTheirValues) {
  EXPECT_EQ(dtype_name(DType::kUInt8), "uint8");
  EXPECT_EQ(dtype_name(DType::kInt16), "int16");
  EXPECT_EQ(dtype_name(DType::kUInt16), "uint16");
  EXPECT_EQ(dtype_size(DType::kUInt8), 1u);
  EXPECT_EQ(dtype_size(DType::kInt16), 2u);
  EXPECT_EQ(dtype_size(DType::kUInt16), 2u);
  const std::uint8_t bytes[] = {200, 7};
  EXPECT_EQ(TensorView::contiguous(bytes, DType::kUInt8, {2}).int_at({0}), 200);
  const std::int16_t shorts[] = {-5, 300};
  EXPECT_EQ(TensorView::contiguous(shorts, DType::kInt16, {2}).int_at({0}), -5);
  const std::uint16_t wide[] = {60000, 1};
  EXPECT_EQ(TensorView::contiguous(wide, DType::kUInt16, {2}).int_at({0}), 60000);
}

TEST(TensorView, DeviceFactories) {
  EXPECT_EQ(Device::cpu().kind, DeviceKind::kCpu);
  EXPECT_EQ(Device::cuda(3).kind, DeviceKind::kCuda);
  EXPECT_EQ(Device::cuda(3).index, 3);
  EXPECT_NE(Device::cuda(0), Device::cuda(1));
  EXPECT_EQ(Device::cuda(2), Device::cuda(2));
}

// ---- contiguous views ----

TEST(TensorView, ContiguousHasRowMajorStrides) {
  std::vector<std::int32_t> data(2 * 3 * 5);
  for (const std::vector<std::int64_t>& shape :
       {std::vector<std::int64_t>{}, {7}, {2, 3}, {2, 3, 5}, {1, 2, 1, 3}, {2, 0, 3}}) {
    SCOPED_TRACE(::testing::PrintToString(shape));
    const TensorView view =
        TensorView::contiguous(data.data(), DType::kInt32, std::span<const std::int64_t>(shape));
    ASSERT_EQ(view.dim(), int(shape.size()));
    const std::vector<std::int64_t> expected = reference_row_major(shape);
    std::int64_t numel = 1;
    for (int axis = 0; axis < view.dim(); ++axis) {
      EXPECT_EQ(view.size(axis), shape[std::size_t(axis)]);
      EXPECT_EQ(view.stride(axis), expected[std::size_t(axis)]);
      numel *= shape[std::size_t(axis)];
    }
    EXPECT_EQ(view.numel(), numel);
    EXPECT_TRUE(view.is_contiguous());
    EXPECT_EQ(view.data(), data.data());
    EXPECT_EQ(view.dtype(), DType::kInt32);
    EXPECT_EQ(view.device(), Device::cpu());
  }
}

TEST(TensorView, ContiguousInitializerListOverload) {
  std::int64_t data[6] = {};
  const TensorView view = TensorView::contiguous(data, DType::kInt64, {2, 3}, Device::cuda(1));
  EXPECT_EQ(view.dim(), 2);
  EXPECT_EQ(view.numel(), 6);
  EXPECT_EQ(view.stride(0), 3);
  EXPECT_EQ(view.stride(1), 1);
  EXPECT_EQ(view.device(), Device::cuda(1));
  ASSERT_EQ(view.shape().size(), 2u);
  EXPECT_EQ(view.shape()[1], 3);
  ASSERT_EQ(view.strides().size(), 2u);
  EXPECT_EQ(view.strides()[0], 3);
}

TEST(TensorView, DefaultIsZeroDimensional) {
  const TensorView view;
  EXPECT_EQ(view.dim(), 0);
  EXPECT_EQ(view.numel(), 1);
  EXPECT_EQ(view.data(), nullptr);
  EXPECT_TRUE(view.shape().empty());
}

TEST(TensorView, ZeroDimensionalViewReadsItsOneElement) {
  const std::int64_t value = -42;
  const TensorView view = TensorView::contiguous(&value, DType::kInt64, {});
  EXPECT_EQ(view.numel(), 1);
  EXPECT_TRUE(view.is_contiguous());
  EXPECT_EQ(view.int_at({}), -42);
}

// ---- strided views ----

TEST(TensorView, TransposedViewIsNotContiguousAndReadsCorrectly) {
  // A [2, 3] row-major buffer viewed as its [3, 2] transpose.
  const std::vector<std::int32_t> data = {0, 1, 2, 10, 11, 12};
  const TensorView view = make(data.data(), DType::kInt32, {3, 2}, {1, 3});
  EXPECT_FALSE(view.is_contiguous());
  EXPECT_EQ(view.numel(), 6);
  for (std::int64_t i = 0; i < 3; ++i) {
    for (std::int64_t j = 0; j < 2; ++j) {
      EXPECT_EQ(view.int_at({i, j}), data[std::size_t(reference_offset({i, j}, {1, 3}))]);
      EXPECT_EQ(view.int_at({i, j}), j * 10 + i);
    }
  }
}

TEST(TensorView, EveryOtherColumnSlice) {
  std::vector<std::int64_t> data(4 * 6);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = std::int64_t(i) * 100;
  const TensorView view = make(data.data(), DType::kInt64, {4, 3}, {6, 2});
  EXPECT_FALSE(view.is_contiguous());
  for (std::int64_t i = 0; i < 4; ++i) {
    for (std::int64_t j = 0; j < 3; ++j) {
      EXPECT_EQ(view.int_at({i, j}), (i * 6 + j * 2) * 100);
    }
  }
}

TEST(TensorView, BroadcastStrideZeroRepeatsARow) {
  const std::vector<std::int32_t> row = {5, 6, 7};
  const TensorView view = make(row.data(), DType::kInt32, {4, 3}, {0, 1});
  EXPECT_FALSE(view.is_contiguous());
  EXPECT_EQ(view.numel(), 12);
  for (std::int64_t i = 0; i < 4; ++i) EXPECT_EQ(view.int_at({i, 2}), 7);
}

TEST(TensorView, SizeOneDimensionsIgnoreTheirStride) {
  const std::vector<std::int32_t> data(6);
  EXPECT_TRUE(make(data.data(), DType::kInt32, {1, 6}, {999, 1}).is_contiguous());
  EXPECT_TRUE(make(data.data(), DType::kInt32, {6, 1}, {1, 0}).is_contiguous());
  EXPECT_TRUE(make(data.data(), DType::kInt32, {2, 1, 3}, {3, 77, 1}).is_contiguous());
  EXPECT_FALSE(make(data.data(), DType::kInt32, {2, 3}, {4, 1}).is_contiguous());
  EXPECT_FALSE(make(data.data(), DType::kInt32, {6}, {2}).is_contiguous());
}

TEST(TensorView, ExplicitRowMajorStridesAreContiguous) {
  const std::vector<std::int32_t> data(24);
  EXPECT_TRUE(make(data.data(), DType::kInt32, {2, 3, 4}, {12, 4, 1}).is_contiguous());
  EXPECT_TRUE(make(data.data(), DType::kInt32, {2, 3, 2, 2}, {12, 4, 2, 1}).is_contiguous());
}

TEST(TensorView, FourDimensionsReadLikeTheReference) {
  std::vector<std::int32_t> data(2 * 3 * 4 * 5);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = std::int32_t(i * 7 % 1009);
  // A permuted view: strides of a [5, 4, 3, 2] buffer read as [2, 3, 4, 5].
  const std::vector<std::int64_t> strides = {1, 2, 6, 24};
  const TensorView view = make(data.data(), DType::kInt32, {2, 3, 4, 5}, strides);
  EXPECT_EQ(view.numel(), 120);
  EXPECT_FALSE(view.is_contiguous());
  for (std::int64_t a = 0; a < 2; ++a)
    for (std::int64_t b = 0; b < 3; ++b)
      for (std::int64_t c = 0; c < 4; ++c)
        for (std::int64_t d = 0; d < 5; ++d)
          EXPECT_EQ(view.int_at({a, b, c, d}),
                    data[std::size_t(reference_offset({a, b, c, d}, strides))]);
}

TEST(TensorView, EmptyViewsHaveNoElementsAndAreContiguous) {
  EXPECT_EQ(make(nullptr, DType::kInt32, {3, 0}, {0, 1}).numel(), 0);
  EXPECT_EQ(TensorView::contiguous(nullptr, DType::kInt64, {0}).numel(), 0);
  // No element can be out of place, whatever the strides (torch agrees).
  EXPECT_TRUE(make(nullptr, DType::kInt32, {3, 0}, {0, 1}).is_contiguous());
  EXPECT_TRUE(make(nullptr, DType::kInt32, {0, 5}, {17, 3}).is_contiguous());
  EXPECT_TRUE(TensorView::contiguous(nullptr, DType::kInt32, {2, 0, 3}).is_contiguous());
}

// ---- construction errors ----

TEST(TensorView, RejectsMoreThanFourDimensions) {
  const std::vector<std::int32_t> data(32);
  const std::vector<std::int64_t> shape = {2, 2, 2, 2, 2};
  EXPECT_MOESTAT_ERROR(make(data.data(), DType::kInt32, shape, {16, 8, 4, 2, 1}),
                       "5 dimensions, at most 4");
  EXPECT_MOESTAT_ERROR(TensorView::contiguous(data.data(), DType::kInt32, {2, 2, 2, 2, 2}),
                       "5 dimensions, at most 4");
  EXPECT_NO_THROW(TensorView::contiguous(data.data(), DType::kInt32, {2, 2, 2, 4}));
}

TEST(TensorView, RejectsNegativeSizes) {
  const std::vector<std::int32_t> data(8);
  EXPECT_MOESTAT_ERROR(make(data.data(), DType::kInt32, {2, -1}, {1, 1}),
                       "size -1 of dimension 1 is negative");
  EXPECT_MOESTAT_ERROR(TensorView::contiguous(data.data(), DType::kInt32, {-3}),
                       "size -3 of dimension 0 is negative");
}

TEST(TensorView, RejectsNegativeStrides) {
  const std::vector<std::int32_t> data(8);
  EXPECT_MOESTAT_ERROR(make(data.data(), DType::kInt32, {2, 2}, {-2, 1}),
                       "stride -2 of dimension 0 is negative");
}

TEST(TensorView, RejectsRankMismatch) {
  const std::vector<std::int32_t> data(8);
  EXPECT_MOESTAT_ERROR(make(data.data(), DType::kInt32, {2, 2}, {1}),
                       "shape has 2 dimensions but strides have 1");
}

TEST(TensorView, RejectsNullDataUnlessEmpty) {
  EXPECT_MOESTAT_ERROR(TensorView::contiguous(nullptr, DType::kInt32, {2, 3}),
                       "data pointer is null");
  // A 0-d view has one element, so it needs data too.
  EXPECT_MOESTAT_ERROR(TensorView::contiguous(nullptr, DType::kInt32, {}), "data pointer is null");
  EXPECT_NO_THROW(TensorView::contiguous(nullptr, DType::kInt32, {4, 0}));
}

// ---- axis queries ----

TEST(TensorView, SizeAndStrideCheckTheAxis) {
  const std::vector<std::int32_t> data(6);
  const TensorView view = TensorView::contiguous(data.data(), DType::kInt32, {2, 3});
  EXPECT_MOESTAT_ERROR(view.size(2), "axis 2 out of range for a 2-d tensor");
  EXPECT_MOESTAT_ERROR(view.size(-1), "axis -1 out of range");
  EXPECT_MOESTAT_ERROR(view.stride(2), "axis 2 out of range");
  EXPECT_MOESTAT_ERROR(view.stride(-1), "axis -1 out of range");
}

// ---- int_at ----

TEST(TensorView, IntAtReadsEveryIntegerDtype) {
  const std::vector<std::int32_t> small = {std::numeric_limits<std::int32_t>::min(), -1, 0,
                                           std::numeric_limits<std::int32_t>::max()};
  const TensorView small_view = TensorView::contiguous(small.data(), DType::kInt32, {4});
  for (std::int64_t i = 0; i < 4; ++i) EXPECT_EQ(small_view.int_at({i}), small[std::size_t(i)]);

  const std::vector<std::int64_t> large = {std::numeric_limits<std::int64_t>::min(), -1,
                                           std::int64_t(1) << 40,
                                           std::numeric_limits<std::int64_t>::max()};
  const TensorView large_view = TensorView::contiguous(large.data(), DType::kInt64, {2, 2});
  EXPECT_EQ(large_view.int_at({0, 0}), large[0]);
  EXPECT_EQ(large_view.int_at({0, 1}), -1);
  EXPECT_EQ(large_view.int_at({1, 0}), std::int64_t(1) << 40);
  EXPECT_EQ(large_view.int_at({1, 1}), large[3]);

  const std::array<unsigned char, 3> flags = {0, 1, 5};
  const TensorView bool_view = TensorView::contiguous(flags.data(), DType::kBool, {3});
  EXPECT_EQ(bool_view.int_at({0}), 0);
  EXPECT_EQ(bool_view.int_at({1}), 1);
  EXPECT_EQ(bool_view.int_at({2}), 1);
}

TEST(TensorView, IntAtChecksIndexCount) {
  const std::vector<std::int32_t> data(6);
  const TensorView view = TensorView::contiguous(data.data(), DType::kInt32, {2, 3});
  EXPECT_MOESTAT_ERROR(view.int_at({0}), "indexing a 2-d tensor with 1 indices");
  EXPECT_MOESTAT_ERROR(view.int_at({0, 0, 0}), "indexing a 2-d tensor with 3 indices");
  EXPECT_MOESTAT_ERROR(view.int_at({}), "indexing a 2-d tensor with 0 indices");
}

TEST(TensorView, IntAtChecksBounds) {
  const std::vector<std::int32_t> data(6);
  const TensorView view = TensorView::contiguous(data.data(), DType::kInt32, {2, 3});
  EXPECT_MOESTAT_ERROR(view.int_at({2, 0}), "index 2 out of range [0, 2) on dimension 0");
  EXPECT_MOESTAT_ERROR(view.int_at({0, 3}), "index 3 out of range [0, 3) on dimension 1");
  EXPECT_MOESTAT_ERROR(view.int_at({-1, 0}), "index -1 out of range");
  EXPECT_MOESTAT_ERROR(view.int_at({1, -1}), "index -1 out of range");
  EXPECT_EQ(view.int_at({1, 2}), 0);
  const TensorView empty = TensorView::contiguous(data.data(), DType::kInt32, {0});
  EXPECT_MOESTAT_ERROR(empty.int_at({0}), "index 0 out of range [0, 0)");
}

TEST(TensorView, IntAtRejectsFloatDtypes) {
  const std::vector<float> f32 = {1.0f};
  const std::vector<double> f64 = {1.0};
  EXPECT_MOESTAT_ERROR(TensorView::contiguous(f32.data(), DType::kFloat32, {1}).int_at({0}),
                       "int_at on a float32 tensor");
  EXPECT_MOESTAT_ERROR(TensorView::contiguous(f64.data(), DType::kFloat64, {1}).int_at({0}),
                       "int_at on a float64 tensor");
}

TEST(TensorView, IntAtRejectsDeviceMemory) {
  const std::vector<std::int32_t> data(2);
  const TensorView view = TensorView::contiguous(data.data(), DType::kInt32, {2}, Device::cuda(0));
  EXPECT_MOESTAT_ERROR(view.int_at({0}), "CUDA memory");
}

TEST(TensorView, IntAtOnADefaultViewThrowsInsteadOfReadingNull) {
  // A default view is 0-d (one element) with no data: reading it must not dereference null.
  const TensorView view;
  EXPECT_MOESTAT_ERROR(view.int_at({}), "no data");
}

// ---- require_* ----

TEST(TensorView, RequireDimsNamesTheArgument) {
  const std::vector<std::int32_t> data(6);
  const TensorView view = TensorView::contiguous(data.data(), DType::kInt32, {2, 3});
  EXPECT_NO_THROW(view.require_dims(2, "ids"));
  EXPECT_MOESTAT_ERROR(view.require_dims(1, "my_ids"), "my_ids must be 1-d, got 2-d");
}

TEST(TensorView, RequireIntegerAcceptsOnlyInt32AndInt64) {
  const std::vector<std::int64_t> data(2);
  EXPECT_NO_THROW(TensorView::contiguous(data.data(), DType::kInt32, {2}).require_integer("x"));
  EXPECT_NO_THROW(TensorView::contiguous(data.data(), DType::kInt64, {2}).require_integer("x"));
  EXPECT_MOESTAT_ERROR(
      TensorView::contiguous(data.data(), DType::kBool, {2}).require_integer("counts"),
      "counts must be int32 or int64, got bool");
  EXPECT_MOESTAT_ERROR(
      TensorView::contiguous(data.data(), DType::kFloat32, {2}).require_integer("counts"),
      "got float32");
  EXPECT_MOESTAT_ERROR(
      TensorView::contiguous(data.data(), DType::kFloat64, {2}).require_integer("counts"),
      "got float64");
}

TEST(TensorView, RequireCpuRejectsCuda) {
  const std::vector<std::int32_t> data(2);
  EXPECT_NO_THROW(TensorView::contiguous(data.data(), DType::kInt32, {2}).require_cpu("x"));
  EXPECT_MOESTAT_ERROR(
      TensorView::contiguous(data.data(), DType::kInt32, {2}, Device::cuda(1)).require_cpu("ids"),
      "ids is in CUDA memory");
}

}  // namespace
}  // namespace moestat
