// RouteLayout and RoutedExperts: the layout of a topology, and every check of validate().
#include <gtest/gtest.h>

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
  EXPECT_MOESTAT_ERROR(routes.validate(), "first position -1");
}

}  // namespace
}  // namespace moestat
