// The routes file: round trips of several requests, and files that must be refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <moestat/io/safetensors.hpp>
#include <moestat/routes/routes_file.hpp>
#include <string>

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

  tensors = tensors_of_two();
  tensors.tensors[1].second.data[0] = std::byte{2};  // a valid byte neither 0 nor 1
  EXPECT_MOESTAT_ERROR(routes::routes_from_tensors(tensors), "valid byte 2 is neither 0 nor 1");
}

/// `routes` through a file's bytes and back.
std::vector<RoutedExperts> through_bytes(const std::vector<RoutedExperts>& routes) {
  const std::string bytes = io::safetensors_to_bytes(routes::routes_to_tensors(routes));
  return routes::read_routes(std::as_bytes(std::span(bytes.data(), bytes.size())));
}

/// `count` requests of no token, ids "r0", "r1", ... as the "requests" metadata.
std::string empty_requests_json(int count) {
  std::string out = "[";
  for (int i = 0; i < count; ++i) {
    out += fmt::format(R"({}{{"request_id": "r{}", "first_position": 0, "num_tokens": 0,
                           "model": "", "placement_version": 0}})",
                       i == 0 ? "" : ",", i);
  }
  return out + "]";
}

TEST(RoutesFile, ReadsAHugeDeclaredTopKWithoutAllocatingIt) {
  // 0 tokens of top_k 2^31 - 1 (a 432-byte file took 16.8 GB and 48 s to read), and 20 such
  // requests of top_k 2^27 (28 s): nothing is allocated from top_k that no row backs.
  const RouteLayout huge{4, {1, 3}, routes::kMaxExperts, routes::kMaxExperts};
  EXPECT_EQ(through_bytes({RoutedExperts::unrecorded(huge, "r", 0, 0)}).size(), 1u);
  const RouteLayout wide{4, {1, 3}, std::int64_t(1) << 27, std::int64_t(1) << 27};
  std::vector<RoutedExperts> twenty;
  for (int i = 0; i < 20; ++i) {
    twenty.push_back(RoutedExperts::unrecorded(wide, fmt::format("r{}", i), 0, 0));
  }
  EXPECT_EQ(through_bytes(twenty), twenty);
}

TEST(RoutesFile, HoldsTheReadBoundForRequestsThatCopyALongLayout) {
  // Every request holds its own copy of the layout's layers: 2000 empty requests of 60000
  // layers in a file of a few hundred KB took gigabytes (100k x 2000: 1.6 GB).
  RouteLayout layout{60000, {}, 8, 2};
  for (std::int64_t layer = 0; layer < 60000; ++layer) layout.layers.push_back(layer);
  io::NamedTensors tensors =
      routes::routes_to_tensors({{RoutedExperts::unrecorded(layout, "one", 0, 0)}});
  EXPECT_EQ(routes::routes_from_tensors(tensors).size(), 1u);
  tensors.metadata["requests"] = empty_requests_json(2000);
  EXPECT_MOESTAT_ERROR(routes::routes_from_tensors(tensors), "its 2000 requests would take 960");
  // The writer refuses what the reader would.
  std::vector<RoutedExperts> many;
  for (int i = 0; i < 100; ++i) {
    many.push_back(RoutedExperts::unrecorded(layout, fmt::format("r{}", i), 0, 0));
  }
  EXPECT_MOESTAT_ERROR(routes::routes_to_tensors(many), "more than 16 times its");
}

TEST(RoutesFile, ParsesItsMetadataWithTheJsonReadersBounds) {
  io::NamedTensors tensors = tensors_of_two();
  tensors.metadata["requests"] = std::string(100, '[') + std::string(100, ']');
  EXPECT_MOESTAT_ERROR(routes::routes_from_tensors(tensors), "nested more than 64 deep");

  tensors = tensors_of_two();
  tensors.metadata["layout"] = R"({"num_decoder_layers": 3, "layers": [0, 2], "num_experts": 5,
                                   "top_k": 2, "top_k": 1})";
  EXPECT_MOESTAT_ERROR(routes::routes_from_tensors(tensors), "\"top_k\" appears twice");
}

TEST(RoutesFile, RefusesALayoutTooLargeForTheConverters) {
  // 2^31 - 1 decoder layers read fine, then a converter to an all-layer format allocated
  // an entry per layer.
  io::NamedTensors tensors = tensors_of_two();
  tensors.metadata["layout"] = R"({"num_decoder_layers": 2147483647, "layers": [0, 2],
                                   "num_experts": 5, "top_k": 2})";
  EXPECT_MOESTAT_ERROR(routes::routes_from_tensors(tensors),
                       "2147483647 decoder layers; need 1 to 65536");
}

TEST(RoutesFile, ReadsBackEveryValueTheWriterTakes) {
  // The extremes of every field: what write_routes accepts, read_routes returns.
  RouteLayout layout{
      routes::kMaxDecoderLayers, {0, routes::kMaxDecoderLayers - 1}, routes::kMaxExperts, 2};
  RoutedExperts last = RoutedExperts::unrecorded(layout, "last", routes::kMaxPosition - 1, 1);
  last.set_id(0, 1, 0, routes::kMaxExperts - 1);
  last.valid.data[1] = std::byte{1};
  last.set_id(0, 1, 1, 0);
  last.placement_version = std::numeric_limits<std::uint64_t>::max();
  RoutedExperts end = RoutedExperts::unrecorded(layout, "", routes::kMaxPosition, 0);
  const std::vector<RoutedExperts> extremes{last, end};
  EXPECT_EQ(through_bytes(extremes), extremes);

  // One past them: refused by the writer (and the reader: one check, RoutedExperts::validate).
  RoutedExperts past = last;
  past.first_position += 1;
  EXPECT_MOESTAT_ERROR(routes::routes_to_tensors({{past}}), "positions must stay in [0, 2^62]");
  io::NamedTensors tensors = routes::routes_to_tensors({{last}});
  tensors.metadata["requests"] = R"([{"request_id": "last", "first_position": 4611686018427387904,
                                      "num_tokens": 1, "model": "", "placement_version": 0}])";
  EXPECT_MOESTAT_ERROR(routes::routes_from_tensors(tensors), "positions must stay in [0, 2^62]");
  RoutedExperts deep = end;
  deep.layout.num_decoder_layers += 1;
  EXPECT_MOESTAT_ERROR(routes::routes_to_tensors({{deep}}), "need 1 to 65536");
}

TEST(RoutesFile, RefusesARequestIdTwice) {
  // Two pieces of one request (two take()s) would read back as two requests of one id, and a
  // dict keyed by id keeps one of them.
  std::vector<RoutedExperts> routes = two_requests();
  routes[1].request_id = routes[0].request_id;
  EXPECT_MOESTAT_ERROR(routes::routes_to_tensors(routes),
                       "requests[0] and requests[1] are both request \"first\"");
  io::NamedTensors tensors = tensors_of_two();
  tensors.metadata["requests"] = R"([{"request_id": "a", "first_position": 0, "num_tokens": 3,
                                      "model": "", "placement_version": 0},
                                     {"request_id": "a", "first_position": 4, "num_tokens": 1,
                                      "model": "", "placement_version": 0}])";
  EXPECT_MOESTAT_ERROR(routes::routes_from_tensors(tensors), "are both request \"a\"");
}

}  // namespace
}  // namespace moestat
