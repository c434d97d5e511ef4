// Every malformed input the JSON readers reject, and what the error says. Documents are
// built here with plain nlohmann-json, then broken one field at a time.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <moestat/io/counts_json.hpp>
#include <moestat/io/document.hpp>
#include <moestat/io/placement_json.hpp>
#include <moestat/io/safetensors.hpp>
#include <moestat/io/snapshot_json.hpp>
#include <moestat/io/statistics.hpp>
#include <nlohmann/json.hpp>

#include "io/test_support.hpp"

namespace moestat {
namespace {

using nlohmann::json;
using test::expect_error;

// ---- Reference documents ----

/// A valid stat snapshot: W = 2 passes, L = 2 layers, E = 2, P = 3, top-1.
json snapshot_document() {
  return {
      {"format", "moestat.snapshot"},
      {"version", 1},
      {"mode", "stat"},
      {"approximate", false},
      {"num_layers", 2},
      {"num_logical_experts", 2},
      {"num_physical_experts", 3},
      {"top_k", 1},
      {"num_passes", 2},
      {"dropped_ids", 0},
      {"dropped_tokens", 0},
      {"pass_ids", {10, 11}},
      {"placement_versions", {0, 0}},
      {"pass_num_tokens", {2, 1}},
      {"logical_count", {{{1, 1}, {0, 0}}, {{0, 1}, {0, 0}}}},
      {"physical_count", {{{1, 1, 0}, {0, 0, 0}}, {{0, 1, 0}, {0, 0, 0}}}},
      {"decayed_logical_load", json::array()},
      {"decayed_physical_load", json::array()},
      {"token_pass_ids", json::array()},
      {"token_placement_versions", json::array()},
      {"token_physical_ids", json::array()},
      {"token_logical_ids", json::array()},
  };
}

/// A valid per-token snapshot: one token, L = 2, top-2, E = 2, P = 3.
json per_token_document() {
  json doc = snapshot_document();
  doc["mode"] = "per_token";
  doc["top_k"] = 2;
  for (const char* key : {"pass_ids", "placement_versions", "pass_num_tokens"}) {
    doc[key] = json::array();
  }
  doc["logical_count"] = json::array();
  doc["physical_count"] = json::array();
  doc["token_pass_ids"] = {10};
  doc["token_placement_versions"] = {0};
  doc["token_physical_ids"] = {{{0, 2}, {-1, -1}}};
  doc["token_logical_ids"] = {{{0, 0}, {-1, -1}}};
  return doc;
}

/// Expects snapshot_from_json to reject `doc` after `mutate`, naming every needle.
void expect_snapshot_error(const std::function<void(json&)>& mutate,
                           std::initializer_list<std::string_view> needles,
                           json doc = snapshot_document()) {
  mutate(doc);
  const std::string text = doc.dump();
  expect_error([&] { io::snapshot_from_json(text); }, needles);
}

TEST(SnapshotJsonErrors, ReferenceDocumentsAreValid) {
  const Snapshot snapshot = io::snapshot_from_json(snapshot_document().dump());
  EXPECT_EQ(snapshot.window_size(), 2);
  EXPECT_EQ(snapshot.logical_totals(), (std::vector<std::int64_t>{1, 2, 0, 0}));
  EXPECT_EQ(io::snapshot_from_json(per_token_document().dump()).num_tokens(), 1);
}

TEST(SnapshotJsonErrors, NotJson) {
  expect_error([] { io::snapshot_from_json("{\"format\": "); }, {"not valid JSON", "line 1"});
  expect_error([] { io::snapshot_from_json(""); }, {"not valid JSON"});
  expect_error([] { io::snapshot_from_json("moestat"); }, {"not valid JSON"});
}

TEST(SnapshotJsonErrors, NotAnObject) {
  expect_error([] { io::snapshot_from_json("[1, 2]"); }, {"expected a JSON object", "an array"});
  expect_error([] { io::snapshot_from_json("3"); }, {"expected a JSON object"});
}

TEST(SnapshotJsonErrors, EveryKeyIsRequired) {
  const json reference = snapshot_document();
  for (const auto& [key, value] : reference.items()) {
    SCOPED_TRACE(key);
    expect_snapshot_error([&key = key](json& doc) { doc.erase(key); },
                          {"missing key \"" + key + "\""});
  }
}

TEST(SnapshotJsonErrors, FormatVersionModeAndFlags) {
  expect_snapshot_error([](json& doc) { doc["format"] = "other"; }, {"format", "\"other\""});
  expect_snapshot_error([](json& doc) { doc["version"] = 2; }, {"version 2"});
  expect_snapshot_error([](json& doc) { doc["mode"] = "statt"; }, {"statt"});
  expect_snapshot_error([](json& doc) { doc["mode"] = 3; }, {"mode is 3", "string"});
  expect_snapshot_error([](json& doc) { doc["approximate"] = 1; }, {"approximate is 1"});
  expect_snapshot_error([](json& doc) { doc["approximate"] = true; },
                        {"approximate is true", "mode is stat"});
}

TEST(SnapshotJsonErrors, Dimensions) {
  expect_snapshot_error([](json& doc) { doc["num_layers"] = 0; }, {"num_layers is 0"});
  expect_snapshot_error([](json& doc) { doc["num_layers"] = 2.0; },
                        {"num_layers is 2.0", "expected an integer"});
  expect_snapshot_error([](json& doc) { doc["num_layers"] = "2"; }, {"num_layers is \"2\""});
  expect_snapshot_error([](json& doc) { doc["num_physical_experts"] = 1; },
                        {"num_physical_experts is 1"});
  expect_snapshot_error([](json& doc) { doc["top_k"] = 4; }, {"top_k is 4"});
  expect_snapshot_error([](json& doc) { doc["num_passes"] = -1; }, {"num_passes is -1"});
  expect_snapshot_error([](json& doc) { doc["num_passes"] = 1; },
                        {"num_passes is 1", "window holds 2"});
  expect_snapshot_error([](json& doc) { doc["dropped_ids"] = -5; },
                        {"dropped_ids is -5", "non-negative"});
}

TEST(SnapshotJsonErrors, SizesBeyondTheLayerSlotBound) {
  // Refused before any array is read: readers allocate [L][E] and [L][P] from these sizes
  // (issue 14: 10^7 layers of 256 experts and an empty window made inspect grow to 24 GB).
  expect_snapshot_error(
      [](json& doc) {
        doc["num_layers"] = 10000000;
        doc["num_logical_experts"] = 256;
        doc["num_physical_experts"] = 256;
      },
      {"snapshot: 10000000 layers x 256 physical experts is more than moestat takes", "2^24"});
  expect_snapshot_error([](json& doc) { doc["num_physical_experts"] = (1 << 23) + 1; },
                        {"2 layers x 8388609 physical experts"});
}

TEST(SnapshotJsonErrors, IntegersOutOfRange) {
  // Above int64 (stored by nlohmann as uint64 or as a float).
  expect_error(
      [] {
        std::string text = snapshot_document().dump();
        text.replace(text.find("\"dropped_ids\":0"), 15, "\"dropped_ids\":9223372036854775808");
        io::snapshot_from_json(text);
      },
      {"dropped_ids is 9223372036854775808"});
  expect_snapshot_error([](json& doc) { doc["dropped_ids"] = 1e30; },
                        {"dropped_ids is 1e+30", "integer"});
  expect_snapshot_error([](json& doc) { doc["placement_versions"][1] = -1; },
                        {"placement_versions[1] is -1", "non-negative"});
}

TEST(SnapshotJsonErrors, SizesThatDoNotMatchTheWindow) {
  expect_snapshot_error([](json& doc) { doc["pass_num_tokens"] = {2}; },
                        {"pass_num_tokens has 1 entries, expected 2"});
  expect_snapshot_error(
      [](json& doc) {
        doc["placement_versions"] = {0, 0, 0};
      },
      {"placement_versions has 3 entries, expected 2"});
  expect_snapshot_error([](json& doc) { doc["logical_count"].erase(1); },
                        {"logical_count has 1 entries, expected 2 (passes)"});
  expect_snapshot_error(
      [](json& doc) {
        doc["logical_count"][1].push_back({0, 0});
      },
      {"logical_count[1] has 3 entries, expected 2 (layers)"});
  expect_snapshot_error(
      [](json& doc) {
        doc["physical_count"][0][1] = {0, 0};
      },
      {"physical_count[0][1] has 2 entries, expected 3 (experts)"});
  expect_snapshot_error(
      [](json& doc) {
        doc["decayed_logical_load"] = {{1.0, 2.0}};
      },
      {"decayed_logical_load has 1 entries, expected 2 (layers)"});
}

TEST(SnapshotJsonErrors, WrongNestingDepth) {
  expect_snapshot_error([](json& doc) { doc["logical_count"][0][1] = 0; },
                        {"logical_count[0][1] is 0", "3 levels of nesting"});
  expect_snapshot_error([](json& doc) { doc["logical_count"][0][1][0] = {0}; },
                        {"logical_count[0][1][0] is an array", "3 levels"});
  expect_snapshot_error([](json& doc) { doc["pass_ids"] = 5; },
                        {"pass_ids is 5", "1 levels of nesting"});
  expect_snapshot_error(
      [](json& doc) {
        doc["pass_ids"] = {{10}, {11}};
      },
      {"pass_ids[0] is an array"});
  expect_snapshot_error([](json& doc) { doc["logical_count"] = json::object(); },
                        {"logical_count is an object"});
}

TEST(SnapshotJsonErrors, NonIntegersAndNegativeCounts) {
  expect_snapshot_error([](json& doc) { doc["logical_count"][1][0][1] = 1.5; },
                        {"logical_count[1][0][1] is 1.5", "expected an integer"});
  expect_snapshot_error([](json& doc) { doc["logical_count"][1][0][1] = "1"; },
                        {"logical_count[1][0][1] is \"1\""});
  expect_snapshot_error([](json& doc) { doc["logical_count"][1][0][1] = nullptr; },
                        {"logical_count[1][0][1] is null"});
  expect_snapshot_error([](json& doc) { doc["logical_count"][1][0][1] = true; },
                        {"logical_count[1][0][1] is true"});
  expect_snapshot_error([](json& doc) { doc["logical_count"][1][0][1] = -2; },
                        {"logical_count[1][0][1] is -2", "non-negative count"});
  expect_snapshot_error([](json& doc) { doc["physical_count"][0][1][2] = -1; },
                        {"physical_count[0][1][2] is -1"});
  expect_snapshot_error([](json& doc) { doc["pass_num_tokens"][0] = -1; },
                        {"pass_num_tokens[0] is -1"});
}

TEST(SnapshotJsonErrors, DecayedLoads) {
  const auto decayed = [](json& doc) {
    doc["mode"] = "decayed";
    doc["decayed_logical_load"] = {{0.5, 1.0}, {0.0, 2.0}};
    doc["decayed_physical_load"] = {{0.5, 1.0, 0.0}, {0.0, 2.0, 0.0}};
  };
  json doc = snapshot_document();
  decayed(doc);
  EXPECT_EQ(io::snapshot_from_json(doc.dump()).decayed_logical_load,
            (std::vector<double>{0.5, 1.0, 0.0, 2.0}));
  expect_snapshot_error(
      [&](json& d) {
        decayed(d);
        d["decayed_logical_load"][1][0] = -0.5;
      },
      {"decayed_logical_load[1][0] is -0.5", "non-negative"});
  expect_snapshot_error(
      [&](json& d) {
        decayed(d);
        d["decayed_physical_load"][0][0] = "x";
      },
      {"decayed_physical_load[0][0] is \"x\"", "number"});
  expect_snapshot_error(
      [&](json& d) {
        decayed(d);
        d["decayed_physical_load"][0] = {1.0};
      },
      {"decayed_physical_load[0] has 1 entries, expected 3 (physical experts)"});
}

TEST(SnapshotJsonErrors, PerTokenIds) {
  expect_snapshot_error([](json& doc) { doc["token_physical_ids"][0][0][1] = 3; },
                        {"token_physical_ids[0][0][1] is 3", "[0, 3) or -1"}, per_token_document());
  expect_snapshot_error([](json& doc) { doc["token_logical_ids"][0][1][0] = -2; },
                        {"token_logical_ids[0][1][0] is -2"}, per_token_document());
  expect_snapshot_error([](json& doc) { doc["token_physical_ids"][0][0] = {1}; },
                        {"token_physical_ids[0][0] has 1 entries, expected 2 (top_k)"},
                        per_token_document());
  expect_snapshot_error([](json& doc) { doc["token_placement_versions"] = json::array(); },
                        {"token_placement_versions has 0 entries, expected 1"},
                        per_token_document());
  expect_snapshot_error([](json& doc) { doc["token_physical_ids"][0][0][0] = 4294967296; },
                        {"token_physical_ids[0][0][0] is 4294967296"}, per_token_document());
}

TEST(SnapshotJsonErrors, WriterRejectsInconsistentSnapshots) {
  Snapshot snapshot = io::snapshot_from_json(snapshot_document().dump());
  snapshot.logical_counts.pop_back();
  expect_error([&] { io::snapshot_to_json(snapshot); },
               {"logical_count has 7 entries, expected 8"});
  snapshot = io::snapshot_from_json(snapshot_document().dump());
  snapshot.physical_counts[4] = -1;
  expect_error([&] { io::snapshot_to_json(snapshot); }, {"physical_count[0][1][1] is -1"});
  snapshot = io::snapshot_from_json(snapshot_document().dump());
  snapshot.mode = RecordMode::kDecayed;
  snapshot.decayed_logical_load = {0.0, 1.0, std::numeric_limits<double>::quiet_NaN(), 0.0};
  snapshot.decayed_physical_load.assign(6, 0.0);
  expect_error([&] { io::snapshot_to_json(snapshot); }, {"decayed_logical_load[1][0] is nan"});
}

// ---- SGLang logical counts ----

void expect_counts_error(const std::string& text, std::initializer_list<std::string_view> needles) {
  expect_error([&] { io::logical_counts_from_json(text); }, needles);
}

TEST(LogicalCountsJsonErrors, Malformed) {
  expect_counts_error("{\"logical_count\": [[1, 2], [3, 4]", {"not valid JSON"});
  expect_counts_error("[[1, 2]]", {"expected a JSON object"});
  expect_counts_error("{\"counts\": [[1, 2]]}", {"missing key \"logical_count\""});
  expect_counts_error("{\"logical_count\": []}", {"logical_count is empty"});
  expect_counts_error("{\"logical_count\": [[]]}", {"empty row"});
  expect_counts_error("{\"logical_count\": 5}", {"0 levels of nesting"});
  expect_counts_error("{\"logical_count\": [1, 2, 3]}", {"1 levels of nesting"});
  expect_counts_error("{\"logical_count\": [[[[1]]]]}", {"4 levels of nesting"});
  expect_counts_error("{\"logical_count\": [[1, 2], [3]]}",
                      {"ragged rows", "logical_count[1] has 1 entries", "have 2"});
  expect_counts_error("{\"logical_count\": [[[1, 2]], [[3, 4], [5, 6]]]}",
                      {"ragged rows", "logical_count[1] has 2 entries"});
  expect_counts_error("{\"logical_count\": [[1, 2], 3]}", {"logical_count[1] is 3"});
  expect_counts_error("{\"logical_count\": [[1, [2]]]}", {"logical_count[0][1] is an array"});
  expect_counts_error("{\"logical_count\": [[1, 2.5]]}",
                      {"logical_count[0][1] is 2.5", "expected an integer"});
  // SGLang's own files spell counts as floats; whole ones are counts.
  EXPECT_EQ(io::logical_counts_from_json("{\"logical_count\": [[1.0, 0.0], [2.0, 3]]}").counts,
            (std::vector<std::int64_t>{1, 0, 2, 3}));
  expect_counts_error("{\"logical_count\": [[1, -2]]}",
                      {"logical_count[0][1] is -2", "non-negative count"});
  expect_counts_error("{\"logical_count\": [[[0], [-7]]]}", {"logical_count[0][1][0] is -7"});
}

TEST(LogicalCountsJsonErrors, WriterChecksSizes) {
  CountWindow counts;
  counts.num_layers = 2;
  counts.num_experts = 2;
  counts.counts = {1, 2, 3};
  expect_error([&] { io::logical_counts_to_json(counts); }, {"3 entries", "= 4"});
  counts.counts = {1, 2, 3, -4};
  expect_error([&] { io::logical_counts_to_json(counts); }, {"logical_count[1][1] is -4"});
  counts.counts = {1, 2, 3, 4};
  counts.window_size = 2;
  expect_error([&] { io::logical_counts_to_json(counts); }, {"without a window axis"});
}

// ---- Placements ----

void expect_placement_error(const std::string& text,
                            std::initializer_list<std::string_view> needles,
                            std::int64_t num_logical_experts = 0) {
  expect_error([&] { io::placement_from_json(text, num_logical_experts); }, needles);
}

TEST(PlacementJsonErrors, Malformed) {
  expect_placement_error("{\"physical_to_logical_map\": [[0, 1]", {"not valid JSON"});
  expect_placement_error("{\"physical_to_logical\": [[0, 1]]}",
                         {"missing key \"physical_to_logical_map\""});
  expect_placement_error("{\"physical_to_logical_map\": []}", {"is empty"});
  expect_placement_error("{\"physical_to_logical_map\": [[]]}", {"at least one physical slot"});
  expect_placement_error("{\"physical_to_logical_map\": [0, 1]}",
                         {"physical_to_logical_map[0] is 0", "2 levels of nesting"});
  expect_placement_error("{\"physical_to_logical_map\": [[0, 1], [1]]}",
                         {"ragged rows", "physical_to_logical_map[1] has 1 entries"});
  expect_placement_error("{\"physical_to_logical_map\": [[0, 1.0]]}",
                         {"physical_to_logical_map[0][1] is 1.0", "integer"});
  expect_placement_error("{\"physical_to_logical_map\": [[0, -1]]}",
                         {"physical_to_logical_map[0][1] is -1"});
  expect_placement_error("{\"physical_to_logical_map\": [[0, 2]]}",
                         {"not a valid placement", "3 logical experts", "2 physical slots"});
  expect_placement_error("{\"physical_to_logical_map\": [[0, 2, 2]]}",
                         {"not a valid placement", "without a replica"});
  expect_placement_error("{\"physical_to_logical_map\": [[0, 1], [1, 1]]}",
                         {"not a valid placement", "layer 1", "expert 0"});
  // E given: ids must be below it and each of the E experts needs a slot.
  expect_placement_error("{\"physical_to_logical_map\": [[0, 1, 2]]}",
                         {"not a valid placement", "logical expert 2"}, 2);
  expect_placement_error("{\"physical_to_logical_map\": [[0, 1, 1]]}",
                         {"not a valid placement", "expert 2"}, 3);
}

// The map is read as the parse meets it (no document built): every element it may hold
// other than an id is refused naming the element, as the document reader named it.
TEST(PlacementJsonErrors, StreamedElements) {
  expect_placement_error("{\"physical_to_logical_map\": 5}",
                         {"physical_to_logical_map is 5, but", "2 levels of nesting"});
  expect_placement_error("{\"physical_to_logical_map\": {\"a\": 1}}",
                         {"physical_to_logical_map is an object, but"});
  expect_placement_error("{\"physical_to_logical_map\": [[0, [1]]]}",
                         {"physical_to_logical_map[0][1] is an array, but",
                          "(layers x "
                          "physical slots)"});
  expect_placement_error("{\"physical_to_logical_map\": [[0, 1], {}]}",
                         {"physical_to_logical_map[1] is an object, but"});
  expect_placement_error("{\"physical_to_logical_map\": [[0, \"x\"]]}",
                         {"physical_to_logical_map[0][1] is \"x\", expected an integer"});
  expect_placement_error("{\"physical_to_logical_map\": [[0, null]]}",
                         {"physical_to_logical_map[0][1] is null, expected an integer"});
  expect_placement_error("{\"physical_to_logical_map\": [[0, 2147483647]]}",
                         {"physical_to_logical_map[0][1] is 2147483647", "[0, 2147483646]"});
  expect_placement_error("{\"physical_to_logical_map\": [[0, 18446744073709551615]]}",
                         {"physical_to_logical_map[0][1] is 18446744073709551615"});
  expect_placement_error("{\"physical_to_logical_map\": [[0, 1], [1, 0, 1]]}",
                         {"ragged rows: physical_to_logical_map[1] has more than 2 entries"});
  expect_placement_error("{\"physical_to_logical_map\": [[0, 1], []]}",
                         {"ragged rows: physical_to_logical_map[1] has 0 entries"});
  expect_placement_error("[[0, 1]]", {"expected a JSON object"});
  expect_placement_error(
      "{\"physical_to_logical_map\": [[0, 1]], \"physical_to_logical_map\": "
      "[[1, 0]]}",
      {"appears twice"});
  // Other keys are checked as any document's and left unread; the map may come after them.
  const Placement placement = io::placement_from_json(
      "{\"note\": {\"a\": [[1], {\"b\": null}]}, \"physical_to_logical_map\": [[1, 0, 1], "
      "[0, 1, 0]], \"more\": [2]}");
  EXPECT_EQ(placement.num_layers(), 2);
  EXPECT_EQ(placement.num_physical_experts(), 3);
  EXPECT_EQ(placement.logical_of(1, 0), 0);
  EXPECT_EQ(placement.logical_of(0, 2), 1);
}

// The map is read before, not instead of, the checks every JSON document gets.
TEST(PlacementJsonErrors, StreamedDocumentsKeepTheJsonBounds) {
  const std::string map = "\"physical_to_logical_map\": [[0, 1]]";
  expect_placement_error("{" + map + "}" + std::string("\0garbage", 8), {"NUL byte at offset"});
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  expect_placement_error("{\"x\": " + deep + ", " + map + "}", {"nested more than 64 deep"});
  expect_placement_error("{" + map + ", \"physical_to_logical_map\": [[1, 0, 1]]}",
                         {"the key \"physical_to_logical_map\" appears twice"});
  std::string objects = "[";
  for (int i = 0; i < 700'000; ++i) objects += "{},";
  objects += "{}]";
  expect_placement_error("{" + map + ", \"x\": " + objects + "}", {"16 times its size plus 1 MiB"});
}

// An engine reads a placement for the [layers, slots] map its model has: a file of another
// shape is refused at its first row or id too many, before the rest is read (a 32 MiB map
// took vLLM's rearrange ten seconds), whatever the format.
TEST(PlacementJsonErrors, TheShapeRequiredIsCheckedAsTheMapIsRead) {
  test::ScratchDir dir;
  const auto read = [&](const std::string& text) {
    const auto path = dir.path() / "placement.json";
    std::ofstream(path, std::ios::trunc) << text;
    return io::read_placement(path, 0, 0, 2, 3);
  };
  EXPECT_EQ(read("{\"physical_to_logical_map\": [[0, 1, 0], [1, 1, 0]]}").num_layers(), 2);
  // what follows the first row too long is not JSON: the refusal comes first
  expect_error([&] { read("{\"physical_to_logical_map\": [[0, 1, 0, 1], [0, 1, 0, "); },
               {"placement.json: physical_to_logical_map[0] has more than 3 entries, expected 3 "
                "(physical slots)"});
  expect_error([&] { read("{\"physical_to_logical_map\": [[0, 1, 0], [1, 0, 1], [0, "); },
               {"physical_to_logical_map has more than 2 entries, expected 2 (layers)"});
  expect_error([&] { read("{\"physical_to_logical_map\": [[0, 1], [0, 1]]}"); },
               {"physical_to_logical_map[0] has 2 entries, expected 3 (physical slots)"});
  expect_error([&] { read("{\"physical_to_logical_map\": [[0, 1, 0]]}"); },
               {"physical_to_logical_map has 1 entries, expected 2 (layers)"});
  // .safetensors (and .pt) are read whole, then refused for their shape
  const auto tensors = dir.path() / "placement.safetensors";
  io::NamedTensors file;
  file.tensors.emplace_back(
      "physical_to_logical_map",
      io::HostTensor::of<std::int64_t>({2, 4}, std::vector<std::int64_t>{0, 1, 0, 1, 1, 0, 1, 0}));
  io::write_safetensors_file(tensors, file);
  expect_error([&] { io::read_placement(tensors, 0, 0, 2, 3); },
               {"physical_to_logical_map is [2, 4], expected [2, 3] (layers x physical slots)"});
  EXPECT_EQ(io::read_placement(tensors, 0, 0, 2, 0).num_physical_experts(), 4);
  expect_error([&] { io::read_placement(tensors, 0, 0, -1, 3); }, {"expected sizes >= 0"});
}

// ---- Detection ----

TEST(DocumentJsonErrors, UnknownDocuments) {
  expect_error([] { io::document_from_json("{\"rank\": 0, \"records\": []}"); },
               {"not a moestat document", "rank", "records"});
  expect_error([] { io::document_from_json("[]"); }, {"expected a JSON object"});
  expect_error([] { io::document_from_json("{\"format\": \"x\"}"); }, {"format is \"x\""});
  expect_error([] { io::document_from_json("nope"); }, {"not valid JSON"});
}

TEST(DocumentJson, PlacementKeyWinsOverLogicalCount) {
  const io::Document document = io::document_from_json(
      "{\"logical_count\": [[1, 2]], \"physical_to_logical_map\": [[1, 0]]}");
  EXPECT_EQ(io::document_kind(document), io::DocumentKind::kPlacement);
  EXPECT_EQ(io::document_kind_name(io::document_kind(document)), "placement");
}

}  // namespace
}  // namespace moestat
