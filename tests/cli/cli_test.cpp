// The `moestat` binary as a user runs it: exit codes, help, inspect on files written here,
// and the demo end to end, re-checked from the files it writes.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cctype>
#include <fstream>
#include <moestat/io/counts_json.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/placement_json.hpp>
#include <moestat/io/pt.hpp>
#include <moestat/io/safetensors.hpp>
#include <moestat/io/snapshot_json.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/io/trace_file.hpp>
#include <moestat/plan/metrics.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>

#include "cli/cli_run.hpp"
#include "io/test_support.hpp"
#include "unit/counts_only.hpp"

namespace moestat {
namespace {

using test::CliRun;
using test::contains;
using test::quoted;
using test::read_whole_file;
using test::run_cli;
using test::ScratchDir;

// ---- Naive references ----

/// Whether some line of `text` starts with `start` and later contains `words`.
bool has_line(const std::string& text, const std::string& start, const std::string& words) {
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    if (line.starts_with(start) && line.find(words) != std::string::npos) return true;
    begin = end + 1;
  }
  return false;
}

/// [L, E] logical counts summed over the window, and the per-layer argmax, by plain loops.
std::vector<std::int64_t> naive_totals(const Snapshot& s) {
  std::vector<std::int64_t> out(std::size_t(s.num_layers * s.num_logical_experts), 0);
  for (std::size_t i = 0; i < s.logical_counts.size(); ++i) {
    out[i % out.size()] += s.logical_counts[i];
  }
  return out;
}

// ---- Basics ----

TEST(Cli, Version) {
  const CliRun run = run_cli("--version");
  EXPECT_EQ(run.code, 0);
  EXPECT_EQ(run.out, "moestat " MOESTAT_VERSION "\n");
}

TEST(Cli, HelpListsEverySubcommandWithADescription) {
  const CliRun run = run_cli("--help");
  EXPECT_EQ(run.code, 0) << run.err;
  EXPECT_TRUE(contains(run.out, "Usage: moestat")) << run.out;
  EXPECT_TRUE(has_line(run.out, "  demo ", "Record a built-in")) << run.out;
  EXPECT_TRUE(has_line(run.out, "  inspect ", "Say what a file is")) << run.out;
  EXPECT_TRUE(has_line(run.out, "  convert ", "Convert logical counts")) << run.out;
  EXPECT_TRUE(has_line(run.out, "  report ", "Draw a recording")) << run.out;
  EXPECT_TRUE(has_line(run.out, "  merge ", "Sum the logical counts")) << run.out;
  EXPECT_TRUE(contains(run.out, "--version"));
}

TEST(Cli, EverySubcommandHelpHasAnExample) {
  for (const char* name : {"demo", "inspect", "convert", "report", "merge"}) {
    SCOPED_TRACE(name);
    const CliRun run = run_cli(std::string(name) + " --help");
    EXPECT_EQ(run.code, 0);
    EXPECT_TRUE(contains(run.out, "Example:\n  moestat ")) << run.out;
    EXPECT_TRUE(contains(run.out, "\n  moestat " + std::string(name) + " ")) << run.out;
  }
}

TEST(Cli, UsageErrorsExitTwo) {
  ScratchDir dir;  // where a wrongly accepted demo would write, so nothing lands elsewhere
  const std::string out = "--out " + quoted(dir.path() / "x");
  for (const std::string& args :
       {std::string("frobnicate"),
        std::string(""),
        std::string("--bogus"),
        std::string("inspect"),
        std::string("inspect a.json --bogus"),
        std::string("inspect a.json --top 0"),
        std::string("demo"),
        "demo --passes 0 " + out,
        "demo --passes 1001 " + out,
        "demo --passes many " + out,
        "demo --seed -1 " + out,
        "demo --preset gpt-5 " + out,
        "demo --device tpu " + out,
        std::string("convert"),
        std::string("convert a.json"),
        std::string("convert a.json b.pt c.pt"),
        std::string("report"),
        std::string("report a.json"),
        std::string("report a.json --gpus 0 --prometheus"),
        "report a.json --bogus --html " + quoted(dir.path() / "r.html")}) {
    SCOPED_TRACE(args);
    const CliRun run = run_cli(args);
    EXPECT_EQ(run.code, 2) << run.out << run.err;
    EXPECT_FALSE(run.err.empty());
  }
  EXPECT_TRUE(contains(run_cli("frobnicate").err, "frobnicate"));
  EXPECT_TRUE(dir.entries().empty());
}

// Issue 29, item 5: "Value 0 not in range 0.000000 to 1797693..." (309 digits).
TEST(Cli, ANumberOutOfItsRangeIsSaidInOneShortLine) {
  for (const auto& [args, message] :
       {std::pair{"plan --stats a.json --replicas 8 --gpus 0 --out p.json",
                  "--gpus: must be greater than 0, got 0"},
        std::pair{"eval --stats a.json --placement p.json --gpus -2",
                  "--gpus: must be greater than 0, got -2"},
        std::pair{"hot-experts --stats a.json --strategy uniform --per-layer -1 --out m.json",
                  "--per-layer: must be 0 or more, got -1"}}) {
    SCOPED_TRACE(args);
    const CliRun run = run_cli(args);
    EXPECT_EQ(run.code, 2) << run.err;
    EXPECT_TRUE(contains(run.err, message)) << run.err;
    EXPECT_FALSE(contains(run.err, "1797693")) << run.err;
    EXPECT_LT(run.err.size(), 300u) << run.err;
  }
}

TEST(Cli, HelpWithUnexpectedWordsIsAUsageError) {
  // Issue 17: these printed the top-level help and exited 0, hiding the mistake.
  for (const auto& [args, word] :
       {std::pair<std::string, std::string>("bogus --help", "bogus"),
        std::pair<std::string, std::string>("--bogus --help", "--bogus"),
        std::pair<std::string, std::string>("plan --bogus --help", "--bogus"),
        std::pair<std::string, std::string>("report a.json extra --help", "extra"),
        std::pair<std::string, std::string>("help plan --bogus", "--bogus")}) {
    SCOPED_TRACE(args);
    const CliRun run = run_cli(args);
    EXPECT_EQ(run.code, 2) << run.out << run.err;
    EXPECT_TRUE(contains(run.err, "'" + word + "'")) << run.err;
    EXPECT_TRUE(run.out.empty()) << run.out;
  }
}

// Issue 42, item 5: `--replica 288` was answered "--replicas is required", and a mistyped
// command "The following arguments were not expected".
TEST(Cli, AMistypedWordIsNamedWithTheOneItIsCloseTo) {
  ScratchDir dir;
  const std::string out = quoted(dir.path() / "out");
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"demoo --out " + out, "moestat: unknown command 'demoo'; did you mean demo?"},
           {"simulat --data " + out, "did you mean simulate?"},
           {"plan --stats a.json --replica 288 --gpus 32 --out " + out,
            "moestat plan: unknown option '--replica'; did you mean --replicas?"},
           {"eval --stats a.json --placment p.json --gpus 8",
            "moestat eval: unknown option '--placment'; did you mean --placement?"},
           {"report a.json --htm=" + out, "unknown option '--htm'; did you mean --html?"},
           {"plan --frobnicate", "moestat plan: unknown option '--frobnicate'\n"},
           {"frobnicate", "moestat: unknown command 'frobnicate'\n"}}) {
    SCOPED_TRACE(args);
    const CliRun run = run_cli(args);
    EXPECT_EQ(run.code, 2) << run.out << run.err;
    EXPECT_TRUE(contains(run.err, message)) << run.err;
    EXPECT_FALSE(contains(run.err, "is required")) << run.err;
  }
  EXPECT_TRUE(dir.entries().empty());
}

TEST(Cli, HelpCommandPrintsTheSameHelpAsTheFlag) {
  const CliRun help = run_cli("help");
  EXPECT_EQ(help.code, 0) << help.err;
  EXPECT_EQ(help.out, run_cli("--help").out);
  EXPECT_TRUE(has_line(help.out, "  help ", "Print this help")) << help.out;
  for (const char* name : {"plan", "report", "help"}) {
    SCOPED_TRACE(name);
    const CliRun command = run_cli(std::string("help ") + name);
    EXPECT_EQ(command.code, 0) << command.err;
    EXPECT_TRUE(contains(command.out, std::string("Usage: moestat ") + name)) << command.out;
    EXPECT_EQ(command.out, run_cli(std::string(name) + " --help").out);
  }
  const CliRun unknown = run_cli("help bogus");
  EXPECT_EQ(unknown.code, 2) << unknown.out;
  EXPECT_TRUE(contains(unknown.err, "no command bogus (the commands are demo, inspect,"))
      << unknown.err;
}

TEST(Cli, FileArgumentsNameEveryFormatTheyRead) {
  // Issue 17: "JSON file" where .pt and .safetensors are read too.
  for (const auto& [command, option] :
       {std::pair<std::string, std::string>("report", "FILE"),
        std::pair<std::string, std::string>("report", "--placement"),
        std::pair<std::string, std::string>("plan", "--stats"),
        std::pair<std::string, std::string>("plan", "--previous"),
        std::pair<std::string, std::string>("eval", "--placement")}) {
    SCOPED_TRACE(command + " " + option);
    const std::string help = run_cli(command + " --help").out;
    const std::size_t at = help.find("  " + option + " ");
    ASSERT_NE(at, std::string::npos) << help;
    // The option's description: up to the next option.
    const std::string text = help.substr(at, help.find("\n  -", at + 1) - at);
    EXPECT_TRUE(contains(text, ".pt")) << text;
    EXPECT_TRUE(contains(text, ".safetensors")) << text;
  }
}

// ---- inspect ----

/// A stat snapshot: 2 passes, 3 layers (layer 1 dense, so empty), E = 4, P = 5, top-2.
Snapshot small_snapshot() {
  Snapshot s;
  s.num_layers = 3;
  s.num_logical_experts = 4;
  s.num_physical_experts = 5;
  s.top_k = 2;
  s.num_passes = 3;
  s.dropped_ids = 4;
  s.pass_ids = {8, 9};
  s.placement_versions = {2, 3};
  s.pass_num_tokens = {5, 2};
  s.logical_counts = {1, 6, 2, 1, 0, 0, 0, 0, 3, 3, 3, 0,  //
                      0, 3, 0, 1, 0, 0, 0, 0, 0, 4, 0, 0};
  s.physical_counts.assign(2 * 3 * 5, 0);
  for (std::size_t pass = 0; pass < 2; ++pass) {
    for (std::size_t i = 0; i < 12; ++i) {
      s.physical_counts[pass * 15 + i / 4 * 5 + i % 4] = s.logical_counts[pass * 12 + i];
    }
  }
  return s;
}

TEST(CliInspect, SnapshotAsText) {
  ScratchDir dir;
  const auto path = dir.path() / "snap.json";
  io::write_file_atomically(path, io::snapshot_to_json(small_snapshot()));
  const CliRun run = run_cli("inspect " + quoted(path));
  EXPECT_EQ(run.code, 0) << run.err;
  EXPECT_TRUE(contains(run.out, "kind:        moestat snapshot, mode stat")) << run.out;
  EXPECT_TRUE(contains(run.out, "2 passes x 3 layers x 4 logical experts (5 physical), top-2"));
  EXPECT_TRUE(contains(run.out, "3 recorded, 2 in the window (pass ids 8..9)"));
  EXPECT_TRUE(contains(run.out, "7 valid tokens"));
  EXPECT_TRUE(contains(run.out, "versions 2, 3"));
  EXPECT_TRUE(contains(run.out, "assignments: 27"));
  EXPECT_TRUE(contains(run.out, "dropped:     4 ids"));
  // Layer 0 totals {1, 9, 2, 2}: hottest 1:9; layer 2 {3, 7, 3, 0}: hottest 1:7 then 0:3 2:3.
  EXPECT_TRUE(contains(run.out, "1:9 2:2 3:2")) << run.out;
  EXPECT_TRUE(contains(run.out, "1:7 0:3 2:3")) << run.out;
}

TEST(CliInspect, SnapshotAsJson) {
  ScratchDir dir;
  const auto path = dir.path() / "snap.json";
  const Snapshot snapshot = small_snapshot();
  io::write_file_atomically(path, io::snapshot_to_json(snapshot));
  const CliRun run = run_cli("inspect --json --top 2 " + quoted(path));
  ASSERT_EQ(run.code, 0) << run.err;
  const auto doc = nlohmann::json::parse(run.out);
  EXPECT_EQ(doc.at("kind"), "snapshot");
  EXPECT_EQ(doc.at("file"), path.string());
  EXPECT_EQ(doc.at("mode"), "stat");
  EXPECT_EQ(doc.at("num_passes"), 3);
  EXPECT_EQ(doc.at("window_size"), 2);
  EXPECT_EQ(doc.at("dropped_ids"), 4);
  EXPECT_EQ(doc.at("valid_tokens_in_window"), 7);
  const std::vector<std::int64_t> totals = naive_totals(snapshot);
  EXPECT_EQ(doc.at("total_assignments"), std::accumulate(totals.begin(), totals.end(), 0));
  ASSERT_EQ(doc.at("layers").size(), 3u);
  for (std::int64_t layer = 0; layer < 3; ++layer) {
    const auto& entry = doc.at("layers")[std::size_t(layer)];
    const auto row = totals.begin() + layer * 4;
    const std::int64_t total = std::accumulate(row, row + 4, std::int64_t{0});
    const std::int64_t max = *std::max_element(row, row + 4);
    EXPECT_EQ(entry.at("layer"), layer);
    EXPECT_EQ(entry.at("total"), total);
    EXPECT_EQ(entry.at("max"), max);
    if (total == 0) {
      EXPECT_TRUE(entry.at("hottest").empty());
      continue;
    }
    EXPECT_DOUBLE_EQ(entry.at("max_over_mean").get<double>(), double(max) / (double(total) / 4));
    ASSERT_EQ(entry.at("hottest").size(), 2u);
    EXPECT_EQ(entry.at("hottest")[0].at("expert"), std::max_element(row, row + 4) - row);
    EXPECT_EQ(entry.at("hottest")[0].at("load"), max);
  }
}

TEST(CliInspect, SnapshotsOfEveryMode) {
  ScratchDir dir;
  ModelTopology topology = ModelTopology::uniform(2, 3, 2);
  const std::vector<std::int32_t> ids = {0, 1, 2, 1, 1, 0};
  const std::vector<std::int32_t> local = {4, 0, 1};
  for (RecordMode mode : {RecordMode::kStat, RecordMode::kStatApprox, RecordMode::kPerPass,
                          RecordMode::kPerToken, RecordMode::kDecayed}) {
    const std::string name(record_mode_name(mode));
    SCOPED_TRACE(name);
    record::CpuRecorder recorder(topology, {.mode = mode, .decay = 0.5});
    recorder.start();
    for (std::int64_t pass = 0; pass < 2; ++pass) {
      recorder.begin_pass(pass);
      if (mode == RecordMode::kStatApprox) {
        recorder.record_local_counts(1, TensorView::contiguous(local.data(), DType::kInt32, {3}),
                                     0);
      } else {
        recorder.record_topk(1, TensorView::contiguous(ids.data(), DType::kInt32, {3, 2}));
      }
      recorder.end_pass();
    }
    const Snapshot snapshot = recorder.snapshot();
    const auto path = dir.path() / (name + ".json");
    io::write_file_atomically(path, io::snapshot_to_json(snapshot));

    const CliRun text = run_cli("inspect " + quoted(path));
    EXPECT_EQ(text.code, 0) << text.err;
    EXPECT_TRUE(contains(text.out, "moestat snapshot, mode " + name)) << text.out;
    const CliRun json = run_cli("inspect --json " + quoted(path));
    ASSERT_EQ(json.code, 0) << json.err;
    const auto doc = nlohmann::json::parse(json.out);
    EXPECT_EQ(doc.at("mode"), name);
    EXPECT_EQ(doc.at("num_passes"), 2);
    // Layer 1 gets 6 assignments per pass (5 for the local counts), so 12 (10) in all; the
    // decayed load is 0.5 * first + second = 9.
    const std::vector<std::int64_t> totals = snapshot.logical_totals();
    EXPECT_EQ(doc.at("total_assignments"), std::accumulate(totals.begin(), totals.end(), 0));
    if (mode == RecordMode::kDecayed) {
      EXPECT_DOUBLE_EQ(doc.at("total_decayed_load").get<double>(), 9.0);
      EXPECT_DOUBLE_EQ(doc.at("layers")[1].at("total").get<double>(), 9.0);
    } else {
      EXPECT_EQ(doc.at("layers")[1].at("total"), mode == RecordMode::kStatApprox ? 10 : 12);
    }
  }
}

TEST(CliInspect, SnapshotWithAnEmptyWindowAllocatesNoLayerTable) {
  // A snapshot's sizes are declared, not held: with no pass in its window there is nothing
  // per layer to show, and nothing to draw (issue 14: an empty window of 10^6 declared
  // layers took 7.1 GB in report --prometheus).
  ScratchDir dir;
  record::CpuRecorder recorder(ModelTopology::uniform(4, 8, 2), {.mode = RecordMode::kStat});
  const auto path = dir.path() / "empty.json";
  io::write_file_atomically(path, io::snapshot_to_json(recorder.snapshot()));
  const CliRun json = run_cli("inspect --json " + quoted(path));
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out).at("layers"), nlohmann::json::array());
  const CliRun report = run_cli("report --gpus 2 --prometheus " + quoted(path));
  EXPECT_EQ(report.code, 1);
  EXPECT_TRUE(contains(report.err, "empty.json: the snapshot holds no counts to draw"))
      << report.err;
}

TEST(CliInspect, OutOfMemoryNamesTheFile) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves more address space than the limit leaves";
#else
  // 100 MB of address space: enough to start, not to hold a 256 MiB (sparse) file. Issue 14:
  // allocation failures printed a bare std::bad_alloc.
  ScratchDir dir;
  const auto big = dir.path() / "big.json";
  std::ofstream(big).close();
  std::filesystem::resize_file(big, std::uintmax_t(256) << 20);
  const auto err = dir.path() / "err";
  const int status = std::system(fmt::format("ulimit -v 100000 && '{}' inspect {} 2>{}",
                                             MOESTAT_CLI_PATH, quoted(big), quoted(err))
                                     .c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  EXPECT_TRUE(contains(test::read_whole_file(err),
                       "cannot read " + big.string() + ": not enough memory for its 268435456"))
      << test::read_whole_file(err);
#endif
}

TEST(CliInspect, LogicalCounts) {
  ScratchDir dir;
  const auto path = dir.path() / "counts.json";
  std::ofstream(path) << R"({"rank": 0, "logical_count": [[5, 0, 1], [0, 0, 0]]})";
  const CliRun text = run_cli("inspect " + quoted(path));
  EXPECT_EQ(text.code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "kind:        SGLang logical_count, [layers][experts]"));
  EXPECT_TRUE(contains(text.out, "2 layers x 3 experts"));
  EXPECT_TRUE(contains(text.out, "assignments: 6"));
  const CliRun json = run_cli("inspect --json " + quoted(path));
  ASSERT_EQ(json.code, 0) << json.err;
  const auto doc = nlohmann::json::parse(json.out);
  EXPECT_EQ(doc.at("kind"), "logical_count");
  EXPECT_EQ(doc.at("has_window_axis"), false);
  EXPECT_EQ(doc.at("num_layers"), 2);
  EXPECT_EQ(doc.at("num_experts"), 3);
  EXPECT_EQ(doc.at("total_assignments"), 6);
  EXPECT_EQ(doc.at("layers")[0].at("hottest")[0].at("expert"), 0);
}

TEST(CliInspect, Placement) {
  ScratchDir dir;
  const auto path = dir.path() / "placement.json";
  // Layer 0 trivial (p % 3), layer 1 replicates expert 2 twice more.
  std::ofstream(path) << R"({"physical_to_logical_map": [[0, 1, 2, 0, 1], [2, 0, 2, 1, 2]]})";
  const CliRun text = run_cli("inspect " + quoted(path));
  EXPECT_EQ(text.code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "kind:        placement")) << text.out;
  EXPECT_TRUE(contains(text.out, "2 layers x 5 physical slots holding 3 logical experts"));
  EXPECT_TRUE(contains(text.out, "1 of 2 trivial"));
  EXPECT_TRUE(contains(text.out, "2x3"));
  const CliRun json = run_cli("inspect --json " + quoted(path));
  ASSERT_EQ(json.code, 0) << json.err;
  const auto doc = nlohmann::json::parse(json.out);
  EXPECT_EQ(doc.at("kind"), "placement");
  EXPECT_EQ(doc.at("max_replicas"), 3);
  EXPECT_EQ(doc.at("trivial_layers"), 1);
  EXPECT_EQ(doc.at("layers")[1].at("replicated")[0].at("expert"), 2);
  EXPECT_EQ(doc.at("layers")[1].at("replicated")[0].at("replicas"), 3);
}

TEST(CliInspect, MissingFileExitsOneNamingThePath) {
  ScratchDir dir;
  const auto path = dir.path() / "nope.json";
  const CliRun run = run_cli("inspect " + quoted(path));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, "moestat: error: cannot read " + path.string())) << run.err;
  EXPECT_FALSE(contains(run.err, ".cpp:")) << "no source locations for users: " << run.err;
  EXPECT_TRUE(run.out.empty());
}

TEST(CliInspect, MalformedFileExitsOneNamingFileAndProblem) {
  ScratchDir dir;
  const auto path = dir.path() / "bad.json";
  std::ofstream(path) << R"({"logical_count": [[1, 2], [3]]})";
  const CliRun run = run_cli("inspect --json " + quoted(path));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, "moestat: error: " + path.string() + ": ragged rows")) << run.err;
  std::ofstream(path) << "{\"hello\": 1}";
  EXPECT_TRUE(contains(run_cli("inspect " + quoted(path)).err, "not a moestat document"));
}

// ---- demo ----

/// The integer that follows the first `before` and is followed by `after` in `out`.
/// (Plain string search: std::regex trips GCC 12's warnings under the sanitizers.)
std::int64_t number_between(const std::string& out, const std::string& before,
                            const std::string& after) {
  const std::size_t start = out.find(before);
  if (start == std::string::npos) {
    ADD_FAILURE() << "no '" << before << "' in\n" << out;
    return -1;
  }
  const std::size_t digits = start + before.size();
  std::size_t end = digits;
  while (end < out.size() && std::isdigit(static_cast<unsigned char>(out[end]))) ++end;
  if (end == digits || out.compare(end, after.size(), after) != 0) {
    ADD_FAILURE() << "no number between '" << before << "' and '" << after << "' in\n" << out;
    return -1;
  }
  return std::stoll(out.substr(digits, end - digits));
}

TEST(CliDemo, EndToEndFilesAreConsistent) {
  ScratchDir dir;
  const CliRun run = run_cli("demo --out " + quoted(dir.path() / "out"));
  ASSERT_EQ(run.code, 0) << run.out << run.err;
  EXPECT_TRUE(contains(run.out, "check: snapshot equals independent tally (")) << run.out;
  EXPECT_TRUE(contains(run.out, "check: snapshot.json and logical_count.pt read back equal"));

  const std::int64_t tokens = number_between(run.out, "\ntokens: ", " valid");
  const std::int64_t routed = number_between(run.out, "\nids: ", " routed");
  const std::int64_t minus_ones = number_between(run.out, " routed, ", " padding (-1)");
  const std::int64_t dropped =
      number_between(run.out, " padding (-1), ", " dropped (out of range)");
  EXPECT_EQ(number_between(run.out, "independent tally (", " assignments"), routed);
  EXPECT_GT(minus_ones, 0);
  EXPECT_GT(dropped, 0);

  const Snapshot s = io::snapshot_from_json(read_whole_file(dir.path() / "out" / "snapshot.json"));
  const std::int64_t top_k = s.top_k;
  EXPECT_EQ(s.num_passes, 64);
  EXPECT_EQ(s.window_size(), 64);
  EXPECT_EQ(s.dropped_ids, dropped);
  EXPECT_EQ(std::accumulate(s.pass_num_tokens.begin(), s.pass_num_tokens.end(), std::int64_t{0}),
            tokens);

  // Per MoE layer: valid tokens x top_k minus the layer's -1 and dropped entries, which are
  // few; over all layers the shortfall is exactly the -1 and dropped entries reported.
  const std::vector<std::int64_t> totals = naive_totals(s);
  std::int64_t shortfall = 0, moe_layers = 0, sum = 0;
  for (std::int64_t layer = 0; layer < s.num_layers; ++layer) {
    const auto row = totals.begin() + layer * s.num_logical_experts;
    const std::int64_t layer_sum =
        std::accumulate(row, row + s.num_logical_experts, std::int64_t{0});
    sum += layer_sum;
    if (layer < 3) {
      EXPECT_EQ(layer_sum, 0) << "dense layer " << layer;
      continue;
    }
    ++moe_layers;
    EXPECT_LE(layer_sum, tokens * top_k) << layer;
    EXPECT_GE(layer_sum, tokens * top_k - minus_ones - dropped) << layer;
    shortfall += tokens * top_k - layer_sum;
  }
  EXPECT_EQ(moe_layers, 58);
  EXPECT_EQ(sum, routed);
  EXPECT_EQ(shortfall, minus_ones + dropped);

  // Physical counts mapped through placement.json give the logical counts, pass by pass.
  const Placement placement =
      io::placement_from_json(read_whole_file(dir.path() / "out" / "placement.json"));
  ASSERT_EQ(placement.num_physical_experts(), s.num_physical_experts);
  for (std::int64_t pass = 0; pass < s.window_size(); ++pass) {
    std::vector<std::int64_t> logical(std::size_t(s.num_layers * s.num_logical_experts), 0);
    for (std::int64_t layer = 0; layer < s.num_layers; ++layer) {
      for (std::int64_t slot = 0; slot < s.num_physical_experts; ++slot) {
        logical[std::size_t(layer * s.num_logical_experts + placement.logical_of(layer, slot))] +=
            s.physical_counts[std::size_t((pass * s.num_layers + layer) * s.num_physical_experts +
                                          slot)];
      }
    }
    const auto first = s.logical_counts.begin() + pass * std::int64_t(logical.size());
    ASSERT_TRUE(std::equal(logical.begin(), logical.end(), first)) << "pass " << pass;
  }

  // The SGLang-style file holds the same window.
  const CountWindow counts =
      io::logical_counts_from_json(read_whole_file(dir.path() / "out" / "logical_count.json"));
  EXPECT_TRUE(counts.has_window_axis);
  EXPECT_EQ(counts.counts, s.logical_counts);

  const CliRun inspect = run_cli("inspect --json " + quoted(dir.path() / "out" / "snapshot.json"));
  ASSERT_EQ(inspect.code, 0) << inspect.err;
  EXPECT_EQ(nlohmann::json::parse(inspect.out).at("total_assignments"), routed);
}

TEST(CliDemo, TiedHotExpertHitRatesSayWhy) {
  // Issue 17: frequency and layer-balanced both printed 49.4% with no word of why.
  ScratchDir dir;
  const CliRun run = run_cli("demo --out " + quoted(dir.path() / "out"));
  ASSERT_EQ(run.code, 0) << run.out << run.err;
  EXPECT_TRUE(contains(run.out,
                       "  frequency (one global top-G): 49.4%\n"
                       "  layer-balanced:               49.4%\n"
                       "  (the same mask: frequency already gives every MoE layer 52 to 78 "
                       "experts, inside layer-balanced's bounds of 0.5x to 2x the even share of "
                       "64.0)\n"))
      << run.out;
}

TEST(CliDemo, DeterministicPerSeed) {
  ScratchDir dir;
  for (const char* name : {"a", "b", "c"}) {
    const std::string seed = std::string(name) == "c" ? "10" : "9";
    const CliRun run =
        run_cli("demo --seed " + seed + " --passes 6 --out " + quoted(dir.path() / name));
    ASSERT_EQ(run.code, 0) << run.out << run.err;
  }
  for (const char* file : {"snapshot.json", "logical_count.json", "placement.json"}) {
    SCOPED_TRACE(file);
    const std::string a = read_whole_file(dir.path() / "a" / file);
    EXPECT_FALSE(a.empty());
    EXPECT_EQ(a, read_whole_file(dir.path() / "b" / file));
    EXPECT_NE(a, read_whole_file(dir.path() / "c" / file));
  }
}

std::int64_t s_layers(const std::filesystem::path& out) {
  return io::snapshot_from_json(read_whole_file(out / "snapshot.json")).num_layers;
}

TEST(CliDemo, CudaDeviceRecordsOrSaysWhatIsMissing) {
  // On a GPU machine the CUDA recorder's snapshot must pass the demo's tally check; without
  // a GPU (or without nvcc at build time) the demo must say which is missing and exit 1.
  ScratchDir dir;
  const CliRun run =
      run_cli("demo --device cuda --preset mixtral-8x7b --passes 4 --out " + quoted(dir.path()));
  if (run.code == 0) {
    EXPECT_TRUE(contains(run.out, "check: snapshot equals independent tally")) << run.out;
    EXPECT_TRUE(contains(run.out, "record_topk on ")) << run.out;
  } else {
    EXPECT_EQ(run.code, 1) << run.out << run.err;
    EXPECT_TRUE(contains(run.err, "--device cuda: ")) << run.err;
    EXPECT_FALSE(std::filesystem::exists(dir.path() / "snapshot.json"));
  }
}

TEST(CliDemo, EveryPresetRunsAndWritesItsReport) {
  ScratchDir dir;
  for (const char* preset : {"deepseek-v3", "mixtral-8x7b", "qwen3-moe"}) {
    SCOPED_TRACE(preset);
    const auto out = dir.path() / preset;
    const CliRun run =
        run_cli(fmt::format("demo --preset {} --passes 3 --out {}", preset, quoted(out)));
    ASSERT_EQ(run.code, 0) << run.out << run.err;
    EXPECT_TRUE(run.out.starts_with(fmt::format("workload: {}, ", preset))) << run.out;
    EXPECT_TRUE(contains(run.out, "check: snapshot equals independent tally")) << run.out;
    // Both planners judged on the passes they did not see, next to each other.
    EXPECT_TRUE(has_line(run.out, "  recorded:", ".")) << run.out;
    EXPECT_TRUE(has_line(run.out, "  EPLB (DeepSeek, window sum):", ".")) << run.out;
    EXPECT_TRUE(has_line(run.out, "  moestat (", ".")) << run.out;
    EXPECT_TRUE(has_line(run.out, "  layer-balanced:", "%")) << run.out;
    // SGLang's files: the stat dump holds the snapshot's window; the placements load.
    EXPECT_EQ(io::read_counts(out / "logical_count.pt"),
              io::logical_counts_from_json(read_whole_file(out / "logical_count.json")));
    for (const char* plan : {"placement_deepseek.pt", "placement_moestat.pt"}) {
      const Placement placement = io::read_placement(out / plan);
      EXPECT_EQ(placement.num_layers(), s_layers(out));
    }
    EXPECT_EQ(io::read_expert_mask(out / "gpu_experts_masks.pt").num_layers, s_layers(out));
    // Not a terminal: no progress bar in the output.
    EXPECT_FALSE(contains(run.out, "\r")) << run.out;
    const std::string html = read_whole_file(out / "report.html");
    EXPECT_TRUE(html.starts_with("<!DOCTYPE html>"));
    const Snapshot s = io::snapshot_from_json(read_whole_file(out / "snapshot.json"));
    const auto cells = std::size_t(s.num_layers * s.num_logical_experts);
    std::size_t found = 0;
    for (auto at = html.find("class=\"cell\""); at != std::string::npos;
         at = html.find("class=\"cell\"", at + 1)) {
      ++found;
    }
    EXPECT_EQ(found, cells);
  }
}

// ---- report ----

TEST(CliReport, WritesHtmlPngAndPrometheus) {
  ScratchDir dir;
  ASSERT_EQ(run_cli("demo --preset mixtral-8x7b --passes 4 --out " + quoted(dir.path())).code, 0);
  const CliRun run = run_cli(
      fmt::format("report {} --placement {} --gpus 4 --html {} --png {} --prometheus",
                  quoted(dir.path() / "logical_count.json"), quoted(dir.path() / "placement.json"),
                  quoted(dir.path() / "r.html"), quoted(dir.path() / "r.png")));
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_TRUE(read_whole_file(dir.path() / "r.html").starts_with("<!DOCTYPE html>"));
  EXPECT_TRUE(read_whole_file(dir.path() / "r.png").starts_with("\x89PNG\r\n"));
  EXPECT_TRUE(contains(run.out, "# TYPE moestat_expert_load gauge\n"));
  EXPECT_TRUE(contains(run.out, "moestat_layer_balancedness{layer=\"31\",placement=\"planned\"} "));
  EXPECT_TRUE(contains(run.out, "moestat_expert_load{layer=\"0\",expert=\"7\"} "));
}

TEST(CliReport, ComparesNamedPlacementsOnHeldOutPassesAsTheDemoPrintsThem) {
  ScratchDir dir;
  const CliRun demo = run_cli("demo --preset mixtral-8x7b --passes 8 --out " + quoted(dir.path()));
  ASSERT_EQ(demo.code, 0) << demo.err;
  // The demo prints each placement's held-out balancedness ("  LABEL: 0.xxx"); its report
  // shows the same.
  const std::string demo_page = read_whole_file(dir.path() / "report.html");
  for (const char* label : {"  recorded:", "  EPLB (", "  moestat ("}) {
    const std::size_t at = demo.out.find(label);
    ASSERT_NE(at, std::string::npos) << label << " not in\n" << demo.out;
    const std::size_t colon = demo.out.find(':', at);
    const std::string figure = demo.out.substr(demo.out.find_first_not_of(' ', colon + 1), 5);
    EXPECT_TRUE(contains(demo_page, "</td><td>" + figure + "</td>")) << label << figure;
  }
  EXPECT_TRUE(contains(demo_page, "on passes 4-7, held out from planning"))
      << demo_page.substr(0, 2000);

  // The same comparison from `moestat report`, named placements in any format, figures as
  // SVG files and the heatmap as PNG.
  const auto figures = dir.path() / "figures";
  const CliRun run = run_cli(fmt::format(
      "report {} --gpus 4 --held-out-from 4 --placement recorded={} --placement EPLB={} "
      "--placement moestat={} --html {} --svg {} --png {}",
      quoted(dir.path() / "snapshot.json"), quoted(dir.path() / "placement.json"),
      quoted(dir.path() / "placement_deepseek.pt"), quoted(dir.path() / "placement_moestat.json"),
      quoted(dir.path() / "r.html"), quoted(figures), quoted(dir.path() / "heatmap.png")));
  ASSERT_EQ(run.code, 0) << run.err;
  const std::string page = read_whole_file(dir.path() / "r.html");
  const auto summary = [](const std::string& html) {
    return html.substr(html.find("<section id=\"summary\">"),
                       html.find("</table>") - html.find("<section id=\"summary\">"));
  };
  EXPECT_EQ(summary(page), summary(demo_page));
  for (const char* name :
       {"heatmap", "gpu-load", "gpu-peak-load", "layer-balancedness", "pass-balancedness"}) {
    const std::string svg = read_whole_file(figures / (std::string(name) + ".svg"));
    EXPECT_TRUE(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\"")) << name;
    EXPECT_TRUE(contains(page, svg)) << name << ": the page embeds another drawing";
  }
  EXPECT_TRUE(read_whole_file(dir.path() / "heatmap.png").starts_with("\x89PNG\r\n"));
}

// Issue 42, item 4: the headline (held-out passes summed) gave moestat +10.4%, while the
// per-pass chart showed the recorded placement above it on most passes, small decode ones.
// The summary and the table give the passes' load-weighted balancedness, by pass size, equal
// to the library's, and say where a placement loses.
TEST(CliReport, GivesPassByPassBalancednessByLoadAndSaysWhereAPlacementLoses) {
  ScratchDir dir;
  ASSERT_EQ(run_cli("demo --out " + quoted(dir.path())).code, 0);
  const std::string page = read_whole_file(dir.path() / "report.html");
  const CountWindow window = io::read_counts(dir.path() / "snapshot.json");
  std::vector<std::int64_t> decode, prefill, all;
  for (std::int64_t pass = 32; pass < window.window_size; ++pass) {
    all.push_back(pass);
    (window.pass_rows.pass_num_tokens[std::size_t(pass)] < 512 ? decode : prefill).push_back(pass);
  }
  ASSERT_FALSE(decode.empty());
  ASSERT_FALSE(prefill.empty());
  const Placement recorded = io::read_placement(dir.path() / "placement.json", 256);
  const Placement moestat = io::read_placement(dir.path() / "placement_moestat.pt", 256);
  const auto served = [&](const std::vector<std::int64_t>& passes, const Placement& placement) {
    return plan::served_balancedness(window, passes, placement, 32);
  };
  EXPECT_TRUE(contains(page, fmt::format("recorded {:.3f}, EPLB", served(all, recorded))));
  EXPECT_TRUE(contains(page, fmt::format("moestat {:.3f} (a step waits", served(all, moestat))));
  EXPECT_TRUE(contains(page, fmt::format("moestat {:.3f} / {:.3f}.", served(decode, moestat),
                                         served(prefill, moestat))))
      << page.substr(0, 4000);
  EXPECT_TRUE(contains(
      page, fmt::format("<td>{:.3f}</td><td>{:.3f}</td><td>{:.3f}</td>", served(all, recorded),
                        served(decode, recorded), served(prefill, recorded))));
  const bool loses = served(decode, moestat) < served(decode, recorded);
  EXPECT_EQ(contains(page, fmt::format("moestat loses to recorded on the {} decode passes",
                                       decode.size())),
            loses);
  EXPECT_TRUE(contains(page, "Balancedness here is that of the judged passes' loads summed"));
}

TEST(CliReport, RefusesPlacementNamesThatClash) {
  ScratchDir dir;
  ASSERT_EQ(run_cli("demo --preset mixtral-8x7b --passes 2 --out " + quoted(dir.path())).code, 0);
  const auto placement = dir.path() / "placement.json";
  const CliRun run =
      run_cli(fmt::format("report {} --gpus 4 --placement {} --placement {} --html {}",
                          quoted(dir.path() / "snapshot.json"), quoted(placement),
                          quoted(placement), quoted(dir.path() / "r.html")));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, "two placements are named planned")) << run.err;
  EXPECT_TRUE(contains(run.err, "--placement")) << run.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "r.html"));
  const CliRun split = run_cli(fmt::format("report {} --gpus 4 --held-out-from 2 --prometheus",
                                           quoted(dir.path() / "snapshot.json")));
  EXPECT_EQ(split.code, 1);
  EXPECT_TRUE(contains(split.err, "--held-out-from 2")) << split.err;
}

TEST(CliReport, ErrorsExitOneNamingTheFile) {
  ScratchDir dir;
  ASSERT_EQ(run_cli("demo --preset mixtral-8x7b --passes 2 --out " + quoted(dir.path())).code, 0);
  const auto snapshot = dir.path() / "snapshot.json";
  const auto absent = dir.path() / "absent.json";
  CliRun run = run_cli(fmt::format("report {} --gpus 2 --prometheus", quoted(absent)));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, absent.string())) << run.err;
  // A placement given as the recording.
  run = run_cli(
      fmt::format("report {} --gpus 2 --prometheus", quoted(dir.path() / "placement.json")));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, "placement.json: is a placement")) << run.err;
  // A placement of another shape.
  const auto other = dir.path() / "other.json";
  std::ofstream(other) << "{\"physical_to_logical_map\": [[0, 1, 2, 3, 4, 5, 6, 7]]}";
  run = run_cli(fmt::format("report {} --placement {} --gpus 2 --prometheus", quoted(snapshot),
                            quoted(other)));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, "other.json: shapes differ: the placement has 1 layers x 8 slots"))
      << run.err;
  // GPUs that do not divide the experts; nothing is written.
  run = run_cli(
      fmt::format("report {} --gpus 3 --html {}", quoted(snapshot), quoted(dir.path() / "r.html")));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, "--gpus 3")) << run.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "r.html"));
}

TEST(CliReport, ReadsThePlacementInEveryFormat) {
  // Issue 17: --placement read JSON only, though eval and plan --previous read .pt.
  ScratchDir dir;
  ASSERT_EQ(run_cli("demo --preset mixtral-8x7b --passes 4 --out " + quoted(dir.path())).code, 0);
  const auto snapshot = quoted(dir.path() / "snapshot.json");
  const CliRun json = run_cli(fmt::format("report {} --placement {} --gpus 4 --prometheus",
                                          snapshot, quoted(dir.path() / "placement.json")));
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_TRUE(contains(json.out, "placement=\"planned\"")) << json.out;
  for (const char* name : {"placement.pt", "placement.safetensors"}) {
    SCOPED_TRACE(name);
    ASSERT_EQ(run_cli(fmt::format("convert {} {}", quoted(dir.path() / "placement.json"),
                                  quoted(dir.path() / name)))
                  .code,
              0);
    const CliRun run = run_cli(fmt::format("report {} --placement {} --gpus 4 --prometheus",
                                           snapshot, quoted(dir.path() / name)));
    EXPECT_EQ(run.code, 0) << run.err;
    EXPECT_EQ(run.out, json.out);
  }
  // A damaged one is refused naming it.
  std::ofstream(dir.path() / "bad.pt") << "PK\x03\x04 not a zip";
  const CliRun bad = run_cli(fmt::format("report {} --placement {} --gpus 4 --prometheus", snapshot,
                                         quoted(dir.path() / "bad.pt")));
  EXPECT_EQ(bad.code, 1);
  EXPECT_TRUE(contains(bad.err, "bad.pt")) << bad.err;
}

TEST(CliReport, GpusIsRequiredWhereverGpusAreCounted) {
  // Issue 17: --gpus defaulted to 8 silently (the demo's 32 GPUs gave 0.605, not 0.473).
  ScratchDir dir;
  ASSERT_EQ(run_cli("demo --preset mixtral-8x7b --passes 2 --out " + quoted(dir.path())).code, 0);
  const auto snapshot = quoted(dir.path() / "snapshot.json");
  for (const std::string& outputs :
       {std::string("--prometheus"), "--html " + quoted(dir.path() / "r.html"),
        "--png " + quoted(dir.path() / "r.png") + " --placement " +
            quoted(dir.path() / "placement.json")}) {
    SCOPED_TRACE(outputs);
    const CliRun run = run_cli(fmt::format("report {} {}", snapshot, outputs));
    EXPECT_EQ(run.code, 2) << run.out << run.err;
    EXPECT_TRUE(
        contains(run.err, "--gpus R is required with --html, --svg, --prometheus or --placement"))
        << run.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "r.html"));
  // The heatmap alone counts no GPU.
  const CliRun png =
      run_cli(fmt::format("report {} --png {}", snapshot, quoted(dir.path() / "r.png")));
  EXPECT_EQ(png.code, 0) << png.err;
  EXPECT_TRUE(read_whole_file(dir.path() / "r.png").starts_with("\x89PNG\r\n"));
}

TEST(CliDemo, UnwritableOutputExitsOneNamingThePath) {
  ScratchDir dir;
  std::ofstream(dir.path() / "file") << "x";
  const auto out = dir.path() / "file" / "sub";
  const CliRun run = run_cli("demo --passes 1 --out " + quoted(out));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, "moestat: error: ")) << run.err;
  EXPECT_TRUE(contains(run.err, out.string())) << run.err;
}

// ---- convert, and inspect of binary formats ----

TEST(CliConvert, CountsAndPlacementsRoundTripThroughEveryFormat) {
  ScratchDir dir;
  const auto counts = dir.path() / "counts.json";
  const auto placement = dir.path() / "placement.json";
  io::write_file_atomically(counts, io::snapshot_to_json(small_snapshot()));
  std::ofstream(placement) << R"({"physical_to_logical_map": [[0, 1, 2, 0, 1], [2, 0, 2, 1, 2]]})";
  for (const auto& [in, stem] : {std::pair(counts, "c"), std::pair(placement, "p")}) {
    auto from = in;
    for (const char* extension : {".pt", ".safetensors", ".json"}) {
      const auto to = dir.path() / (std::string(stem) + "-out" + extension);
      const CliRun run = run_cli("convert " + quoted(from) + " " + quoted(to));
      ASSERT_EQ(run.code, 0) << run.out << run.err;
      EXPECT_TRUE(contains(run.out, "wrote " + to.string())) << run.out;
      from = to;
    }
    // The last hop wrote JSON again: equal to what the input says.
    if (stem == std::string("c")) {
      EXPECT_EQ(io::read_counts(from), test::counts_only(count_window_of(small_snapshot())));
    } else {
      EXPECT_TRUE(io::read_placement(from).same_maps(io::read_placement(placement)));
    }
  }
}

TEST(CliConvert, BadInputOrOutputExitsOneAndWritesNothing) {
  ScratchDir dir;
  const auto placement = dir.path() / "placement.json";
  std::ofstream(placement) << R"({"physical_to_logical_map": [[0, 1]]})";
  const CliRun extension =
      run_cli("convert " + quoted(placement) + " " + quoted(dir.path() / "out.txt"));
  EXPECT_EQ(extension.code, 1);
  EXPECT_TRUE(contains(extension.err, "unknown extension \".txt\"")) << extension.err;
  const CliRun missing = run_cli("convert " + quoted(dir.path() / "absent.pt") + " " +
                                 quoted(dir.path() / "out.json"));
  EXPECT_EQ(missing.code, 1);
  EXPECT_TRUE(contains(missing.err, "absent.pt")) << missing.err;
  const CliRun unwritable =
      run_cli("convert " + quoted(placement) + " " + quoted(placement / "out.pt"));
  EXPECT_EQ(unwritable.code, 1);
  EXPECT_TRUE(contains(unwritable.err, "cannot write")) << unwritable.err;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"placement.json"});
}

TEST(CliConvert, UnknownExtensionListsEveryAcceptedOne) {
  // Issue 17: .pth is written, but the error listed only .json, .pt or .safetensors.
  ScratchDir dir;
  const auto placement = dir.path() / "placement.json";
  std::ofstream(placement) << R"({"physical_to_logical_map": [[0, 1]]})";
  const CliRun wrong = run_cli("convert " + quoted(placement) + " " + quoted(dir.path() / "p.pkl"));
  EXPECT_EQ(wrong.code, 1);
  EXPECT_TRUE(contains(wrong.err,
                       "unknown extension \".pkl\" (want .json, .pt, .pth or "
                       ".safetensors)"))
      << wrong.err;
  const CliRun pth = run_cli("convert " + quoted(placement) + " " + quoted(dir.path() / "p.pth"));
  EXPECT_EQ(pth.code, 0) << pth.err;
  EXPECT_TRUE(io::read_placement(dir.path() / "p.pth").same_maps(io::read_placement(placement)));
}

TEST(CliInspect, TorchFileListsItsContentsAndSummarisesTheStatistics) {
  ScratchDir dir;
  const auto path = dir.path() / "dump.pt";
  io::write_counts(path, count_window_of(small_snapshot()));
  const CliRun text = run_cli("inspect " + quoted(path));
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "kind:        SGLang logical_count")) << text.out;
  EXPECT_TRUE(contains(text.out, "format:      torch .pt")) << text.out;
  EXPECT_TRUE(contains(text.out, "[\"logical_count\"]: tensor int32 [2, 3, 4] on cpu")) << text.out;
  const CliRun json = run_cli("inspect --json " + quoted(path));
  ASSERT_EQ(json.code, 0) << json.err;
  const auto doc = nlohmann::json::parse(json.out);
  EXPECT_EQ(doc.at("format"), "pt");
  EXPECT_EQ(doc.at("kind"), "logical_count");
  EXPECT_EQ(doc.at("total_assignments"), 27);
  EXPECT_EQ(doc.at("contents").at("[\"rank\"]"), "int 0");
}

TEST(CliInspect, ListsTheFirstTwoHundredTensorsOfASafetensorsFile) {
  // As for .pt files (issue 14: a header of 160k tensors was listed whole, slowly).
  ScratchDir dir;
  io::NamedTensors file;
  for (int i = 0; i < 300; ++i) {
    file.tensors.emplace_back(fmt::format("t{:03}", i),
                              io::HostTensor::of<std::int32_t>({1}, std::vector<std::int32_t>{i}));
  }
  io::write_safetensors_file(dir.path() / "many.safetensors", file);
  const CliRun json = run_cli("inspect --json " + quoted(dir.path() / "many.safetensors"));
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out).at("contents").size(), 200u);
}

TEST(CliInspect, OtherTorchFilesAndSafetensorsAndMasks) {
  ScratchDir dir;
  io::write_pt_file(dir.path() / "other.pt", io::PtValue(io::PtList{io::PtValue(1)}));
  const CliRun other = run_cli("inspect --json " + quoted(dir.path() / "other.pt"));
  ASSERT_EQ(other.code, 0) << other.err;
  EXPECT_EQ(nlohmann::json::parse(other.out).at("kind"), "other");
  io::write_expert_mask(dir.path() / "mask.safetensors", {2, 2, {1, 0, 1, 1}});
  const CliRun mask = run_cli("inspect " + quoted(dir.path() / "mask.safetensors"));
  ASSERT_EQ(mask.code, 0) << mask.err;
  EXPECT_TRUE(contains(mask.out, "on GPU:      3 of 4 experts (1 to 2 per layer)")) << mask.out;
  EXPECT_TRUE(contains(mask.out, "gpu_experts_masks: tensor bool [2, 2] on cpu")) << mask.out;
  io::write_expert_mask(dir.path() / "mask.json", {2, 2, {1, 0, 1, 1}});
  EXPECT_EQ(nlohmann::json::parse(run_cli("inspect --json " + quoted(dir.path() / "mask.json")).out)
                .at("experts_on_gpu"),
            3);
}

TEST(CliInspect, TraceFileEvenWhileBeingWritten) {
  ScratchDir dir;
  const auto path = dir.path() / "trace.bin";
  io::TraceWriter writer(
      path, {.num_layers = 2, .num_logical_experts = 3, .num_physical_experts = 4, .top_k = 1});
  const std::vector<std::int32_t> ids = {0, 3, 1, -1};
  writer.append(7, 2, ids);
  writer.append(8, 2, std::span(ids).first(2));
  const CliRun text = run_cli("inspect " + quoted(path));
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "kind:        per-token trace")) << text.out;
  EXPECT_TRUE(contains(text.out, "passes:      2 (pass ids 7..8)")) << text.out;
  EXPECT_TRUE(contains(text.out, "tokens:      3")) << text.out;
  std::ofstream(path, std::ios::app) << "PASS";  // a chunk header cut short
  const auto doc = nlohmann::json::parse(run_cli("inspect --json " + quoted(path)).out);
  EXPECT_EQ(doc.at("format"), "trace");
  EXPECT_EQ(doc.at("truncated"), true);
  EXPECT_EQ(doc.at("num_tokens"), 3);
}

CountWindow numbered_counts(std::int64_t passes, std::int64_t experts, std::int64_t first) {
  CountWindow counts{.window_size = passes,
                     .num_layers = 2,
                     .num_experts = experts,
                     .has_window_axis = true,
                     .counts = {}};
  for (std::int64_t i = 0; i < passes * 2 * experts; ++i) counts.counts.push_back(first + i);
  return counts;
}

TEST(CliMerge, SumsPassByPassOrTotals) {
  ScratchDir dir;
  const CountWindow rank0 = numbered_counts(2, 3, 0);
  const CountWindow rank1 = numbered_counts(2, 3, 100);
  io::write_counts(dir.path() / "rank0.pt", rank0);
  io::write_counts(dir.path() / "rank1.json", rank1);
  const auto out = dir.path() / "cluster.safetensors";
  const CliRun run = run_cli("merge " + quoted(out) + " " + quoted(dir.path() / "rank0.pt") + " " +
                             quoted(dir.path() / "rank1.json"));
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_TRUE(contains(run.out, "2 files, 2 passes of 2 layers x 3 experts")) << run.out;
  CountWindow expected = rank0;
  for (std::size_t i = 0; i < expected.counts.size(); ++i) expected.counts[i] += rank1.counts[i];
  EXPECT_EQ(io::read_counts(out), expected);

  // A third recording with another number of passes adds up only as totals.
  io::write_counts(dir.path() / "other.json", numbered_counts(3, 3, 7));
  const auto totals = dir.path() / "totals.json";
  const CliRun merged = run_cli("merge --totals " + quoted(totals) + " " + quoted(out) + " " +
                                quoted(dir.path() / "other.json"));
  ASSERT_EQ(merged.code, 0) << merged.err;
  EXPECT_TRUE(contains(merged.out, "2 files, totals of 2 layers x 3 experts")) << merged.out;
  const CountWindow read = io::read_counts(totals);
  EXPECT_FALSE(read.has_window_axis);
  std::vector<std::int64_t> sum = expected.totals();
  const std::vector<std::int64_t> other = numbered_counts(3, 3, 7).totals();
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += other[i];
  EXPECT_EQ(read.counts, sum);
}

TEST(CliMerge, MismatchesExitOneNamingTheFileAndWriteNothing) {
  ScratchDir dir;
  io::write_counts(dir.path() / "a.json", numbered_counts(2, 3, 0));
  io::write_counts(dir.path() / "b.json", numbered_counts(2, 4, 0));
  io::write_counts(dir.path() / "c.json", numbered_counts(5, 3, 0));
  const auto out = quoted(dir.path() / "out.pt");
  const auto a = quoted(dir.path() / "a.json");
  const CliRun experts = run_cli("merge " + out + " " + a + " " + quoted(dir.path() / "b.json"));
  EXPECT_EQ(experts.code, 1);
  EXPECT_TRUE(contains(experts.err, "b.json: 2 layers x 4 experts")) << experts.err;
  const CliRun passes = run_cli("merge " + out + " " + a + " " + quoted(dir.path() / "c.json"));
  EXPECT_EQ(passes.code, 1);
  EXPECT_TRUE(contains(passes.err, "c.json: 5 passes")) << passes.err;
  EXPECT_TRUE(contains(passes.err, "--totals")) << passes.err;
  const CliRun missing = run_cli("merge " + out + " " + a + " " + quoted(dir.path() / "d.pt"));
  EXPECT_EQ(missing.code, 1);
  EXPECT_TRUE(contains(missing.err, "d.pt")) << missing.err;
  EXPECT_EQ(run_cli("merge " + out).code, 2);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.json", "b.json", "c.json"}));
}

}  // namespace
}  // namespace moestat
