// RouteLayout and RoutedExperts: the layout of a topology, and every check of validate().
#include <gtest/gtest.h>

#include <limits>
#include <moestat/routes/routed_experts.hpp>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

using routes::RoutedExperts;
using routes::RouteLayout;

RouteLayout two_layers() { return RouteLayout{4, {1, 3}, 300, 2}; }

TEST(RouteLayout, OfATopologyKeepsItsMoeLayers) {
  ModelTopology topology = ModelTopology::uniform(4, 8, 2);
  topology.moe_layers = {false, true, true, false};
  const RouteLayout layout = RouteLayout::of(topology);
  EXPECT_EQ(layout.layers, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(layout.column_of(2), 1);
  EXPECT_EQ(layout.column_of(0), -1);
  EXPECT_EQ(layout.id_dtype(), DType::kUInt8);
  EXPECT_EQ(layout.bytes_per_token(), 2 * (2 + 1));
}

TEST(RouteLayout, RefusesLayoutsThatCannotHoldRoutes) {
  EXPECT_MOESTAT_ERROR((RouteLayout{4, {}, 8, 2}.validate()), "no MoE layer");
  EXPECT_MOESTAT_ERROR((RouteLayout{4, {2, 1}, 8, 2}.validate()), "ascend");
  EXPECT_MOESTAT_ERROR((RouteLayout{4, {4}, 8, 2}.validate()), "outside the model's 4");
  EXPECT_MOESTAT_ERROR((RouteLayout{4, {1}, 8, 9}.validate()), "top_k 9");
}

TEST(RoutedExperts, SliceAndAppendRoundTrip) {
  RoutedExperts routes = RoutedExperts::unrecorded(two_layers(), "r", 5, 4);
  EXPECT_EQ(routes.ids.dtype, DType::kUInt16);
  for (std::int64_t t = 0; t < 4; ++t) {
    for (std::int64_t c = 0; c < 2; ++c) {
      routes.set_id(t, c, 0, 299 - t);
      routes.set_id(t, c, 1, t + c);
      routes.valid.data[std::size_t(t * 2 + c)] = std::byte{1};
    }
  }
  routes.validate();
  RoutedExperts joined = routes.slice(0, 1);
  joined.append(routes.slice(1, 4));
  EXPECT_EQ(joined, routes);
  EXPECT_EQ(routes.slice(2, 3).first_position, 7);
  EXPECT_MOESTAT_ERROR(joined.append(routes.slice(0, 1)), "start at position 5");
  EXPECT_MOESTAT_ERROR(routes.slice(3, 5), "outside its 4 tokens");
}

TEST(RoutedExperts, ValidateNamesTheFirstProblem) {
  RoutedExperts routes = RoutedExperts::unrecorded(two_layers(), "r", 0, 2);
  routes.validate();  // nothing recorded: valid as it is
  routes.set_id(0, 1, 0, 7);
  EXPECT_MOESTAT_ERROR(routes.validate(), "position 0 layer 3 is not valid but holds ids");
  routes.valid.data[1] = std::byte{1};
  routes.validate();  // ids 7 and 0
  routes.set_id(0, 1, 1, 7);
  EXPECT_MOESTAT_ERROR(routes.validate(), "position 0 layer 3 chose an expert twice");
  routes.set_id(0, 1, 1, 300);
  EXPECT_MOESTAT_ERROR(routes.validate(), "expert 300 outside [0, 300)");
  routes.first_position = -1;
  EXPECT_MOESTAT_ERROR(routes.validate(), "first position -1 with 2 tokens");
}

TEST(RouteLayout, CapsDecoderLayers) {
  // Converters to the all-layer formats allocate an entry per decoder layer.
  RouteLayout{routes::kMaxDecoderLayers, {0}, 8, 2}.validate();
  EXPECT_MOESTAT_ERROR((RouteLayout{routes::kMaxDecoderLayers + 1, {0}, 8, 2}.validate()),
                       "65537 decoder layers; need 1 to 65536");
  EXPECT_MOESTAT_ERROR((RouteLayout{(std::int64_t(1) << 31) - 1, {0}, 8, 2}.validate()),
                       "decoder layers; need 1 to 65536");
}

TEST(RoutedExperts, ValidatesADeclaredTopKWithoutAllocatingIt) {
  // top_k 2^31 - 1 and no token: nothing to check per row, and nothing allocated from top_k
  // (it allocated a top_k-long row: 16 GiB).
  const std::int64_t huge = routes::kMaxExperts;
  const RouteLayout layout{4, {1, 3}, huge, huge};
  RoutedExperts routes = RoutedExperts::unrecorded(layout, "r", 0, 0);
  routes.validate();
  // A shape the bytes do not back is refused before any row is read.
  routes.ids.shape[0] = 1;
  routes.valid.shape[0] = 1;
  EXPECT_MOESTAT_ERROR(routes.validate(), "ids hold 0 bytes, not the 1 tokens");
}

TEST(RoutedExperts, RefusesValidBytesOtherThanZeroAndOne) {
  RoutedExperts routes = RoutedExperts::unrecorded(two_layers(), "r", 0, 1);
  routes.valid.data[1] = std::byte{2};
  EXPECT_MOESTAT_ERROR(routes.validate(), "position 0 layer 3: valid byte 2 is neither 0 nor 1");
}

TEST(RoutedExperts, PositionsStayWithinTheBoundRecordersShare) {
  RoutedExperts routes = RoutedExperts::unrecorded(two_layers(), "r", routes::kMaxPosition - 2, 2);
  routes.validate();
  routes.first_position += 1;
  EXPECT_MOESTAT_ERROR(routes.validate(), "positions must stay in [0, 2^62]");
  routes.first_position = std::numeric_limits<std::int64_t>::max();
  EXPECT_MOESTAT_ERROR(routes.validate(), "positions must stay in [0, 2^62]");
  RoutedExperts empty = RoutedExperts::unrecorded(two_layers(), "e", routes::kMaxPosition, 0);
  empty.validate();
}

}  // namespace
}  // namespace moestat
