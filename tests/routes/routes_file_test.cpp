// The routes file: round trips of several requests, and files that must be refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <moestat/io/safetensors.hpp>
#include <moestat/routes/routes_file.hpp>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

using routes::RoutedExperts;
using routes::RouteLayout;

std::vector<RoutedExperts> two_requests() {
  const RouteLayout layout{3, {0, 2}, 5, 2};
  RoutedExperts first = RoutedExperts::unrecorded(layout, "first", 0, 3);
  RoutedExperts second = RoutedExperts::unrecorded(layout, "second \"quoted\"", 4, 1);
  for (RoutedExperts* routes : {&first, &second}) {
    for (std::int64_t t = 0; t < routes->num_tokens(); ++t) {
      for (std::int64_t c = 0; c < 2; ++c) {
        if (t == 1 && c == 1) continue;  // one row not recorded
        routes->set_id(t, c, 0, (t + c) % 5);
        routes->set_id(t, c, 1, (t + c + 1) % 5);
        routes->valid.data[std::size_t(t * 2 + c)] = std::byte{1};
      }
    }
    routes->model = "tiny-moe";
  }
  second.placement_version = 9;
  return {first, second};
}

TEST(RoutesFile, RoundTripsSeveralRequests) {
  const auto routes = two_requests();
  const std::filesystem::path path =
      std::filesystem::path(::testing::TempDir()) / "routes_file_test.safetensors";
  routes::write_routes_file(path, routes);
  EXPECT_EQ(routes::read_routes_file(path), routes);
  const io::NamedTensors tensors = io::read_safetensors_file(path);
  EXPECT_TRUE(routes::is_routes_file(tensors));
  EXPECT_EQ(tensors.find("ids")->dtype, DType::kUInt8);
  std::filesystem::remove(path);
}

io::NamedTensors tensors_of_two() { return routes::routes_to_tensors(two_requests()); }

TEST(RoutesFile, RefusesFilesThatDoNotDescribeTheirRows) {
  io::NamedTensors tensors = tensors_of_two();
  tensors.metadata["format"] = "something else";
  EXPECT_MOESTAT_ERROR(routes::routes_from_tensors(tensors), "not a routes file");

  tensors = tensors_of_two();
  tensors.metadata["version"] = "2";
  EXPECT_MOESTAT_ERROR(routes::routes_from_tensors(tensors), "version 2");

  tensors = tensors_of_two();
  tensors.metadata["requests"] = R"([{"request_id": "a", "first_position": 0, "num_tokens": 9,
                                      "model": "", "placement_version": 0}])";
  EXPECT_MOESTAT_ERROR(routes::routes_from_tensors(tensors), "num_tokens = 9 outside [0, 4]");

  tensors = tensors_of_two();
  tensors.metadata["requests"] = R"([{"request_id": "a", "first_position": 0, "num_tokens": 1,
                                      "model": "", "placement_version": 0}])";
  EXPECT_MOESTAT_ERROR(routes::routes_from_tensors(tensors), "cover 1 of its 4 rows");

  tensors = tensors_of_two();
  tensors.metadata["layout"] = R"({"num_decoder_layers": 3, "layers": [0, 2], "num_experts": 300,
                                   "top_k": 2})";
  EXPECT_MOESTAT_ERROR(routes::routes_from_tensors(tensors), "300 experts need uint16");

  tensors = tensors_of_two();
  tensors.metadata["layout"] = "{";
  EXPECT_MOESTAT_ERROR(routes::routes_from_tensors(tensors), "\"layout\" metadata is not JSON");

  tensors = tensors_of_two();
  tensors.tensors[0].second.data[0] = std::byte{7};  // expert 7 of 5
  EXPECT_MOESTAT_ERROR(routes::routes_from_tensors(tensors), "expert 7 outside [0, 5)");

  tensors = tensors_of_two();
  tensors.tensors[0].second.data[1] = tensors.tensors[0].second.data[0];  // one expert twice
  EXPECT_MOESTAT_ERROR(routes::routes_from_tensors(tensors), "chose an expert twice");

  EXPECT_MOESTAT_ERROR(routes::routes_to_tensors({}), "no requests");
}

}  // namespace
}  // namespace moestat
