// SGLang-compatible files and loading by format: recorder dumps of every mode checked
// against the snapshot they came from, placements and masks in every format, and the real
// statistics in ../shared/data converted to .pt and .safetensors and back unchanged.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <moestat/io/counts_json.hpp>
#include <moestat/io/document.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/safetensors.hpp>
#include <moestat/io/sglang.hpp>
#include <moestat/io/snapshot_json.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/record/cpu_recorder.hpp>

#include "io/test_support.hpp"
#include "unit/counts_only.hpp"

namespace moestat::test {
namespace {

using io::HostTensor;
using io::PtValue;

const std::filesystem::path kFixtures = MOESTAT_FIXTURE_DIR;

/// A 3-layer model (layer 1 dense), 4 experts on 6 slots, top-2; five passes recorded, the
/// placement changing before pass 2.
Snapshot recorded(RecordMode mode, const Placement& later) {
  ModelTopology topology = ModelTopology::uniform(3, 4, 2);
  topology.moe_layers[1] = false;
  topology.num_physical_experts = 6;
  record::CpuRecorder recorder(topology, {.mode = mode, .window_size = 3});
  recorder.start();
  for (std::int64_t pass = 0; pass < 5; ++pass) {
    if (pass == 2) recorder.set_placement(later);
    const std::vector<std::int32_t> ids = {0, 5, 3, -1, std::int32_t(pass % 6), 2, 1, 1};
    recorder.begin_pass(100 + pass);
    recorder.record_topk(0, TensorView::contiguous(ids.data(), DType::kInt32, {4, 2}), 3);
    recorder.record_topk(2, TensorView::contiguous(ids.data(), DType::kInt32, {4, 2}));
    recorder.end_pass();
  }
  return recorder.snapshot();
}

/// Whether `name` is expert_distribution_recorder_{digits}.{digits}{suffix} (no std::regex:
/// GCC 12 warns inside it under the sanitizers).
bool is_dump_name(const std::string& name, const std::string& suffix) {
  const std::string prefix = "expert_distribution_recorder_";
  if (name.size() < prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string time = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  const auto dot = time.find('.');
  auto digits = [](const std::string& text) {
    return !text.empty() && std::all_of(text.begin(), text.end(), ::isdigit);
  };
  return dot != std::string::npos && digits(time.substr(0, dot)) && digits(time.substr(dot + 1));
}

const Placement kLater(3, 6, 4, {0, 1, 2, 3, 0, 0, 0, 1, 2, 3, 0, 1, 3, 2, 1, 0, 3, 3}, 1);

// ---- names and places ----

TEST(SglangDump, NamesFollowPythonsTimeFormat) {
  EXPECT_EQ(io::sglang_dump_name(1730000000.0), "expert_distribution_recorder_1730000000.0.pt");
  EXPECT_EQ(io::sglang_dump_name(1730000000.25, 3),
            "expert_distribution_recorder_1730000000.25_3.pt");
}

TEST(SglangDump, DirectoryComesFromTheEnvironment) {
  const char* saved = std::getenv("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR");
  const std::string restore = saved != nullptr ? saved : "";
  ::unsetenv("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR");
  EXPECT_EQ(io::sglang_dump_directory(), "/tmp");
  ::setenv("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR", "/data/dumps", 1);
  EXPECT_EQ(io::sglang_dump_directory(), "/data/dumps");
  if (saved != nullptr) {
    ::setenv("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR", restore.c_str(), 1);
  } else {
    ::unsetenv("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR");
  }
}

// ---- dumps of each mode ----

TEST(SglangDump, StatDumpHoldsTheWindowAsInt32) {
  ScratchDir dir;
  const Snapshot snapshot = recorded(RecordMode::kStat, kLater);
  const auto path = io::write_sglang_dump(snapshot, kLater, 0, dir.path() / "new");
  EXPECT_TRUE(is_dump_name(path.filename().string(), ".pt")) << path;
  EXPECT_EQ(path.parent_path(), dir.path() / "new");
  const PtValue dump = io::read_pt_file(path);
  ASSERT_EQ(dump.dict().size(), 3u);
  EXPECT_EQ(dump.dict()[0].first.as_str(), "rank");
  EXPECT_EQ(dump.at("rank").as_int(), 0);
  EXPECT_TRUE(dump.at("average_utilization_rate_over_window").is_none());
  const HostTensor& counts = dump.at("logical_count").tensor();
  EXPECT_EQ(counts.dtype, DType::kInt32);
  EXPECT_EQ(counts.shape, (std::vector<std::int64_t>{3, 3, 4}));
  EXPECT_EQ(counts.to_int64(), snapshot.logical_counts);
  EXPECT_EQ(io::read_counts(path), test::counts_only(count_window_of(snapshot)));
}

TEST(SglangDump, HugeCountsAreWrittenAsInt64) {
  CountWindow counts{.window_size = 1,
                     .num_layers = 1,
                     .num_experts = 2,
                     .has_window_axis = false,
                     .counts = {std::int64_t(1) << 40, 1}};
  const PtValue dump = io::sglang_stat_dump(counts, 2, 0.5);
  EXPECT_EQ(dump.at("logical_count").tensor().dtype, DType::kInt64);
  EXPECT_EQ(dump.at("logical_count").tensor().shape, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(dump.at("average_utilization_rate_over_window").as_float(), 0.5);
  EXPECT_EQ(io::logical_counts_from_pt(
                io::read_pt(std::as_bytes(std::span<const char>(io::pt_to_bytes(dump))))),
            counts);
}

TEST(SglangDump, PerPassRecordsHoldEachPassesPhysicalCounts) {
  ScratchDir dir;
  const Snapshot snapshot = recorded(RecordMode::kPerPass, kLater);
  const auto path = io::write_sglang_dump(snapshot, kLater, 5, dir.path());
  EXPECT_TRUE(is_dump_name(path.filename().string(), "_5.pt")) << path;
  const PtValue dump = io::read_pt_file(path);
  const io::PtList& records = dump.at("records").list();
  ASSERT_EQ(std::int64_t(records.size()), snapshot.window_size());
  const std::int64_t slice = 3 * 6;
  for (std::size_t pass = 0; pass < records.size(); ++pass) {
    EXPECT_EQ(records[pass].at("forward_pass_id").as_int(), snapshot.pass_ids[pass]);
    EXPECT_EQ(records[pass].at("rank").as_int(), 5);
    EXPECT_EQ(records[pass].at("gatherer_key").as_str(), "primary");
    const std::vector<std::int64_t> expected(
        snapshot.physical_counts.begin() + std::ptrdiff_t(pass) * slice,
        snapshot.physical_counts.begin() + std::ptrdiff_t(pass + 1) * slice);
    EXPECT_EQ(records[pass].at("global_physical_count").tensor().to_int64(), expected);
  }
  EXPECT_TRUE(io::placement_from_pt(
                  PtValue(io::PtDict{{PtValue("physical_to_logical_map"),
                                      PtValue(dump.at("last_physical_to_logical_map").tensor())}}))
                  .same_maps(kLater));
  // Read back as logical counts through the last map: the passes recorded under it agree
  // with the snapshot (those under the first placement need not: SGLang keeps one map).
  const CountWindow logical = io::read_counts(path);
  ASSERT_EQ(logical.window_size, snapshot.window_size());
  const std::int64_t layer_size = 3 * 4;
  int later_passes = 0;
  for (std::int64_t pass = 0; pass < snapshot.window_size(); ++pass) {
    if (snapshot.placement_versions[std::size_t(pass)] != kLater.version()) continue;
    ++later_passes;
    for (std::int64_t i = pass * layer_size; i < (pass + 1) * layer_size; ++i) {
      EXPECT_EQ(logical.counts[std::size_t(i)], snapshot.logical_counts[std::size_t(i)]) << i;
    }
  }
  EXPECT_EQ(later_passes, 3);
}

TEST(SglangDump, PerTokenRecordsHoldLayerMajorIds) {
  const Snapshot snapshot = recorded(RecordMode::kPerToken, kLater);
  const PtValue dump = io::sglang_per_token_dump(snapshot, kLater, 1);
  const io::PtList& records = dump.at("records").list();
  ASSERT_EQ(records.size(), 5u);
  std::int64_t token = 0;
  for (std::size_t pass = 0; pass < records.size(); ++pass) {
    const HostTensor& ids = records[pass].at("topk_ids_of_layer").tensor();
    ASSERT_EQ(ids.shape.size(), 3u);
    ASSERT_EQ(ids.shape[0], 3);
    ASSERT_EQ(ids.shape[2], io::kSglangTopkColumns);  // SGLang's width, whatever the top-k
    const std::int64_t n = ids.shape[1];
    std::vector<std::string> keys;
    for (const auto& [key, value] : records[pass].dict()) keys.push_back(key.as_str());
    EXPECT_EQ(keys, (std::vector<std::string>{"forward_pass_id", "rank", "gatherer_key",
                                              "topk_ids_of_layer", "misc_objects",
                                              "global_physical_count"}));
    EXPECT_TRUE(records[pass].at("misc_objects").list().empty());
    const std::vector<std::int32_t> values = ids.values<std::int32_t>();
    std::vector<std::int64_t> physical(3 * 6, 0);
    for (std::int64_t t = 0; t < n; ++t, ++token) {
      EXPECT_EQ(snapshot.token_pass_ids[std::size_t(token)],
                records[pass].at("forward_pass_id").as_int());
      for (std::int64_t l = 0; l < 3; ++l) {
        for (std::int64_t k = 0; k < 2; ++k) {
          const std::int32_t id = snapshot.token_physical_ids[std::size_t((token * 3 + l) * 2 + k)];
          EXPECT_EQ(values[std::size_t((l * n + t) * 8 + k)], id);
          if (id >= 0) ++physical[std::size_t(l * 6 + id)];
        }
        for (std::int64_t k = 2; k < 8; ++k) {
          EXPECT_EQ(values[std::size_t((l * n + t) * 8 + k)], -1);
        }
      }
    }
    EXPECT_EQ(records[pass].at("global_physical_count").tensor().to_int64(), physical);
  }
  EXPECT_EQ(token, snapshot.num_tokens());
}

TEST(SglangDump, PassRecordsMakeSglangsRecords) {
  const Snapshot snapshot = recorded(RecordMode::kPerToken, kLater);
  const std::int64_t last = snapshot.token_pass_ids.back();
  const auto kept = std::int64_t(
      std::count(snapshot.token_pass_ids.begin(), snapshot.token_pass_ids.end(), last));
  const io::PtList input_ids(std::size_t(kept + 2), PtValue(std::int64_t(9)));
  const io::PtDict metadata = {{PtValue("input_ids"), PtValue(input_ids)},
                               {PtValue("forward_mode"), PtValue(std::int64_t(1))}};
  const io::PtList misc = {PtValue(io::PtDict{{PtValue("layer_id"), PtValue(std::int64_t(0))}})};
  // Given out of order; one pass (7) kept no token.
  const std::vector<io::SglangPassRecord> passes = {
      {.pass_id = last, .forward_pass_id = 41, .metadata = metadata, .misc_objects = misc},
      {.pass_id = 7,
       .forward_pass_id = 40,
       .metadata = {{PtValue("input_ids"), PtValue(io::PtList(2, PtValue(std::int64_t(1))))}},
       .misc_objects = {}}};
  const io::PtList records =
      io::sglang_per_token_dump(snapshot, kLater, 0, passes).at("records").list();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].at("forward_pass_id").as_int(), 40);
  EXPECT_EQ(records[0].at("topk_ids_of_layer").tensor().values<std::int32_t>(),
            std::vector<std::int32_t>(3 * 2 * 8, -1));
  EXPECT_EQ(records[0].at("global_physical_count").tensor().to_int64(),
            std::vector<std::int64_t>(3 * 6, 0));
  std::vector<std::string> keys;
  for (const auto& [key, value] : records[1].dict()) keys.push_back(key.as_str());
  EXPECT_EQ(keys, (std::vector<std::string>{"forward_pass_id", "rank", "gatherer_key", "input_ids",
                                            "forward_mode", "topk_ids_of_layer", "misc_objects",
                                            "global_physical_count"}));
  EXPECT_EQ(records[1].at("forward_pass_id").as_int(), 41);
  EXPECT_EQ(records[1].at("misc_objects"), PtValue(misc));
  const HostTensor& ids = records[1].at("topk_ids_of_layer").tensor();
  EXPECT_EQ(ids.shape, (std::vector<std::int64_t>{3, kept + 2, 8}));
  const std::vector<std::int32_t> values = ids.values<std::int32_t>();
  for (std::int64_t l = 0; l < 3; ++l) {  // the two tokens the recorder did not keep: -1
    for (std::int64_t t = kept; t < kept + 2; ++t) {
      for (std::int64_t k = 0; k < 8; ++k) {
        EXPECT_EQ(values[std::size_t((l * (kept + 2) + t) * 8 + k)], -1);
      }
    }
  }

  const Snapshot per_pass = recorded(RecordMode::kPerPass, kLater);
  std::vector<io::SglangPassRecord> named;
  for (const std::int64_t pass_id : per_pass.pass_ids) {
    named.push_back(
        {.pass_id = pass_id, .forward_pass_id = pass_id * 10, .metadata = {}, .misc_objects = {}});
  }
  const io::PtList pass_records =
      io::sglang_per_pass_dump(per_pass, kLater, 0, named).at("records").list();
  ASSERT_EQ(pass_records.size(), per_pass.pass_ids.size());
  for (std::size_t i = 0; i < pass_records.size(); ++i) {
    EXPECT_EQ(pass_records[i].at("forward_pass_id").as_int(), per_pass.pass_ids[i] * 10);
  }
  named.pop_back();
  expect_error([&] { io::sglang_per_pass_dump(per_pass, kLater, 0, named); },
               {"no record of the engine's for pass"});
}

TEST(SglangDump, RefusesModesWithoutADump) {
  ScratchDir dir;
  expect_error(
      [&] { io::write_sglang_dump(recorded(RecordMode::kDecayed, kLater), kLater, 0, dir.path()); },
      {"decayed"});
  expect_error(
      [&] { io::sglang_per_pass_dump(recorded(RecordMode::kPerToken, kLater), kLater, 0); },
      {"pass window"});
  expect_error([&] { io::sglang_per_token_dump(recorded(RecordMode::kStat, kLater), kLater, 0); },
               {"per_token"});
  expect_error(
      [&] {
        io::sglang_per_pass_dump(recorded(RecordMode::kPerPass, kLater),
                                 Placement::trivial(2, 6, 4), 0);
      },
      {"does not match"});
  EXPECT_TRUE(dir.entries().empty());
}

// ---- files torch.save wrote ----

TEST(SglangFixtures, StatDumpAndPlacementReadThroughTheGenericLoaders) {
  const CountWindow counts = io::read_counts(kFixtures / "sglang_stat_dump.pt");
  EXPECT_EQ(counts.window_size, 2);
  EXPECT_TRUE(counts.has_window_axis);
  EXPECT_EQ(counts.num_layers, 3);
  EXPECT_EQ(counts.num_experts, 4);
  EXPECT_EQ(counts.counts[23], 23);
  const Placement placement = io::read_placement(kFixtures / "sglang_placement.pt");
  EXPECT_EQ(placement.num_logical_experts(), 4);
  EXPECT_EQ(placement.logical_of(1, 5), 3);
  expect_error([] { io::read_counts(kFixtures / "sglang_placement.pt"); },
               {"sglang_placement.pt", "physical_to_logical_map"});
}

// ---- every format ----

TEST(Statistics, PlacementsRoundTripInEveryFormat) {
  ScratchDir dir;
  for (const char* name : {"p.json", "p.pt", "p.safetensors"}) {
    io::write_placement(dir.path() / name, kLater);
    const Placement back = io::read_placement(dir.path() / name, 0, 7);
    EXPECT_TRUE(back.same_maps(kLater)) << name;
    EXPECT_EQ(back.version(), 7u);
  }
  // What --init-expert-location loads: the map and nothing else.
  EXPECT_EQ(io::read_pt_file(dir.path() / "p.pt").dict().size(), 1u);
  expect_error([&] { io::write_placement(dir.path() / "p.txt", kLater); },
               {"p.txt", "unknown extension"});
}

TEST(Statistics, CountsJsonCarriesAnEnginesMembersAfterTheCounts) {
  ScratchDir dir;
  const CountWindow counts =
      test::counts_only(io::logical_counts_from_json(R"({"logical_count": [[1, 2], [3, 4]]})"));
  const std::filesystem::path path = dir.path() / "c.json";
  io::write_counts(path, counts, R"({"vllm_eplb": {"num_ranks": 2, "what": "a \"load\""}})");
  const std::string text = io::read_text_file(path);
  const std::string counts_only = io::logical_counts_to_json(counts);  // "{...\n}\n"
  EXPECT_EQ(text.substr(0, counts_only.size() - 3), counts_only.substr(0, counts_only.size() - 3));
  EXPECT_GT(text.find("\"vllm_eplb\""), text.find("\"logical_count\"")) << text;
  EXPECT_NE(text.find(R"(a \"load\")"), std::string::npos) << text;
  EXPECT_EQ(io::read_counts(path), counts);
  expect_error([&] { io::write_counts(dir.path() / "c.pt", counts, "{}"); },
               {"c.pt: counts metadata is written only to a .json file"});
  expect_error([&] { io::write_counts(path, counts, "[1]"); },
               {"counts metadata: expected a JSON object, got array"});
  expect_error([&] { io::write_counts(path, counts, "{"); }, {"text that is not JSON"});
  expect_error([&] { io::write_counts(path, counts, R"({"logical_count": 1})"); },
               {"logical_count is the counts' own key"});
  expect_error([&] { io::write_counts(path, counts, R"({"a": 1, "a": 2})"); }, {"twice"});
}

TEST(Statistics, CountsRoundTripInEveryFormatAndAreDetectedByContent) {
  ScratchDir dir;
  const CountWindow counts =
      test::counts_only(count_window_of(recorded(RecordMode::kStat, kLater)));
  for (const char* name : {"c.json", "c.pt", "c.safetensors"}) {
    io::write_counts(dir.path() / name, counts);
    EXPECT_EQ(io::read_counts(dir.path() / name), counts) << name;
    // Renamed to a wrong extension, the contents still decide.
    std::filesystem::copy_file(dir.path() / name, dir.path() / (std::string(name) + ".bin"));
    EXPECT_EQ(io::read_counts(dir.path() / (std::string(name) + ".bin")), counts);
  }
  // A moestat snapshot gives its window with what it knows of each pass.
  const Snapshot snapshot = recorded(RecordMode::kStat, kLater);
  io::write_file_atomically(dir.path() / "s.json", io::snapshot_to_json(snapshot));
  const CountWindow window = io::read_counts(dir.path() / "s.json");
  EXPECT_EQ(window, count_window_of(snapshot));
  EXPECT_EQ(window.pass_rows.pass_ids, snapshot.pass_ids);
  EXPECT_EQ(window.pass_rows.placement_versions, snapshot.placement_versions);
  EXPECT_EQ(window.pass_rows.pass_num_tokens, snapshot.pass_num_tokens);
  EXPECT_EQ(io::detect_file_format(dir.path() / "c.json"), io::FileFormat::kJson);
  EXPECT_EQ(io::detect_file_format(dir.path() / "c.pt"), io::FileFormat::kPt);
  EXPECT_EQ(io::detect_file_format(dir.path() / "c.safetensors"), io::FileFormat::kSafetensors);
  EXPECT_EQ(io::read_safetensors_file(dir.path() / "c.safetensors").metadata.at("format"),
            "moestat.logical_count");
}

TEST(Statistics, ExpertMasksRoundTripInEveryFormat) {
  ScratchDir dir;
  const ExpertMask mask{2, 3, {1, 0, 0, 0, 1, 1}};
  for (const char* name : {"m.json", "m.pt", "m.safetensors"}) {
    io::write_expert_mask(dir.path() / name, mask);
    EXPECT_EQ(io::read_expert_mask(dir.path() / name), mask) << name;
  }
  const PtValue file = io::read_pt_file(dir.path() / "m.pt");
  const HostTensor& bare = file.tensor();
  EXPECT_EQ(bare.dtype, DType::kBool);
  EXPECT_EQ(bare.shape, (std::vector<std::int64_t>{2, 3}));
  expect_error(
      [&] {
        io::write_expert_mask(dir.path() / "x.pt", {2, 3, {1, 0}});
      },
      {"does not fill"});
}

TEST(Statistics, IntegralFloatCountsAsSglangPublishesThem) {
  EXPECT_EQ(io::logical_counts_from_json(R"({"logical_count": [[1.0, 0.0], [2e3, 7]]})").counts,
            (std::vector<std::int64_t>{1, 0, 2000, 7}));
  expect_error([] { io::logical_counts_from_json(R"({"logical_count": [[1.5]]})"); },
               {"logical_count[0][0] is 1.5"});
}

TEST(Statistics, FiddlerExpertPopularityIsReadAsCounts) {
  const std::string text =
      R"({"total_input_tokens": 10, "expert_popularity": [[3, 1], [2, 2], [0, 4]]})";
  const CountWindow counts = io::logical_counts_from_json(text);
  EXPECT_FALSE(counts.has_window_axis);
  EXPECT_EQ(counts.window_size, 1);
  EXPECT_EQ(counts.num_layers, 3);
  EXPECT_EQ(counts.num_experts, 2);
  EXPECT_EQ(counts.counts, (std::vector<std::int64_t>{3, 1, 2, 2, 0, 4}));
  EXPECT_EQ(io::document_kind(io::document_from_json(text)), io::DocumentKind::kLogicalCounts);
  ScratchDir dir;
  io::write_file_atomically(dir.path() / "popularity.json", text);
  EXPECT_EQ(io::read_counts(dir.path() / "popularity.json"), counts);
  expect_error([] { io::logical_counts_from_json(R"({"expert_popularity": [[[1]]]})"); },
               {"expert_popularity has 3 levels", "expected [layers][experts] (2)"});
  expect_error([] { io::logical_counts_from_json(R"({"expert_popularity": [[1, -2]]})"); },
               {"expert_popularity[0][1] is -2"});
}

TEST(Statistics, FractionalLoadsAreKeptWhereAskedForAndNeverWrittenAsCounts) {
  const CountWindow kept = io::logical_counts_from_json(
      R"({"logical_count": [[[1.5, 2]], [[0, 0.25]]]})", io::Fractions::kKeep);
  EXPECT_TRUE(kept.is_fractional());
  EXPECT_TRUE(kept.counts.empty());
  EXPECT_EQ(kept.fractional_counts, (std::vector<double>{1.5, 2, 0, 0.25}));
  EXPECT_EQ(kept.window_size, 2);
  // Whole entries stay exact counts even where fractions are allowed.
  const CountWindow whole = io::logical_counts_from_json(
      R"({"logical_count": [[9007199254740993, 2.0]]})", io::Fractions::kKeep);
  EXPECT_FALSE(whole.is_fractional());
  EXPECT_EQ(whole.counts, (std::vector<std::int64_t>{9007199254740993, 2}));
  expect_error([&] { io::logical_counts_to_json(kept); },
               {"logical_count[0][0][0] is 1.5", "whole token counts"});
  expect_error([&] { kept.totals(); }, {"fractional"});
  ScratchDir dir;
  expect_error([&] { io::write_counts(dir.path() / "c.pt", kept); }, {"fractional"});
}

// ---- real statistics ----

TEST(Statistics, RealSglangStatisticsSurviveEveryFormat) {
  const std::filesystem::path data =
      std::filesystem::path(MOESTAT_SHARED_DIR) / "data" / "deepseek-v3-sglang-stats";
  if (!std::filesystem::is_directory(data)) GTEST_SKIP() << data << " is absent";
  ScratchDir dir;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(data)) {
    if (entry.path().extension() != ".json") continue;
    const CountWindow original = io::read_counts(entry.path());
    for (const char* name : {"c.pt", "c.safetensors"}) {
      io::write_counts(dir.path() / name, original);
      const CountWindow back = io::read_counts(dir.path() / name);
      EXPECT_EQ(back, original) << entry.path() << " via " << name;
      EXPECT_EQ(io::logical_counts_to_json(back), io::logical_counts_to_json(original));
    }
    ++files;
  }
  EXPECT_GT(files, 0);
}

}  // namespace
}  // namespace moestat::test
