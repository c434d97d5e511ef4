// `moestat` on hostile files as a user meets them (issue 14, items 7, 8, 10 and 11): counts
// whose sums overflow, bytes that would drive the terminal, files of another or a damaged
// format. Every refusal exits 1 with a message that names the file and says why.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <moestat/io/pt.hpp>
#include <moestat/io/trace_file.hpp>
#include <string>

#include "cli/cli_run.hpp"
#include "io/test_support.hpp"
#include "io/zip_archive.hpp"

namespace moestat {
namespace {

using namespace std::string_literals;  // file bytes hold NUL
using test::CliRun;
using test::contains;
using test::quoted;
using test::read_whole_file;
using test::run_cli;
using test::ScratchDir;

// ---- Naive references ----

/// The first byte of `text` that is neither printable ASCII nor a newline, or -1.
int first_unprintable(const std::string& text) {
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte != '\n' && (byte < 0x20 || byte >= 0x7f)) return byte;
  }
  return -1;
}

void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

constexpr const char* kMax = "9223372036854775807";

// ---- item 7: sums of counts ----

TEST(CliOverflow, InspectRefusesCountsWhoseSumOverflowsNamingTheFile) {
  ScratchDir dir;
  const auto path = dir.path() / "huge.json";
  std::ofstream(path) << fmt::format(R"({{"logical_count": [[{0}, {0}], [2, 3]]}})", kMax);
  for (const std::string flags : {"", "--json "}) {
    const CliRun run = run_cli("inspect " + flags + quoted(path));
    EXPECT_EQ(run.code, 1) << run.out;
    EXPECT_TRUE(contains(run.err, "moestat: error: " + path.string() + ": ")) << run.err;
    EXPECT_TRUE(contains(run.err, "overflows int64")) << run.err;
    EXPECT_FALSE(contains(run.out, "assignments")) << run.out;
  }
}

TEST(CliOverflow, MergeRefusesASumBeyondInt64NamingTheFileAndWritesNothing) {
  ScratchDir dir;
  const auto a = dir.path() / "a.json";
  const auto b = dir.path() / "b.json";
  std::ofstream(a) << fmt::format(R"({{"logical_count": [[{0}, {0}], [2, 3]]}})", kMax);
  std::ofstream(b) << fmt::format(R"({{"logical_count": [[{0}, {0}], [2, 3]]}})", kMax);
  const auto out = dir.path() / "out.json";
  const CliRun run = run_cli("merge " + quoted(out) + " " + quoted(a) + " " + quoted(b));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, b.string() + ": logical_count[0][0] plus the same count"))
      << run.err;
  EXPECT_TRUE(contains(run.err, "overflows int64")) << run.err;
  // --totals sums each file first: the first file alone overflows.
  const CliRun totals =
      run_cli("merge --totals " + quoted(out) + " " + quoted(a) + " " + quoted(b));
  EXPECT_EQ(totals.code, 1);
  EXPECT_TRUE(contains(totals.err, a.string() + ": the sum of logical_count overflows int64"))
      << totals.err;
  // Each file fits, but their sum does not.
  std::ofstream(a) << fmt::format(R"({{"logical_count": [[{}, 0]]}})", kMax);
  std::ofstream(b) << R"({"logical_count": [[1, 0]]})";
  const CliRun pair = run_cli("merge " + quoted(out) + " " + quoted(a) + " " + quoted(b));
  EXPECT_EQ(pair.code, 1);
  EXPECT_TRUE(contains(pair.err, b.string() + ": logical_count[0][0]")) << pair.err;
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.json", "b.json"}));
}

// ---- item 8: files torch.load would read differently ----

TEST(CliAmbiguous, InspectRefusesADictThatSetsAKeyTwice) {
  ScratchDir dir;
  // {"n": 1, "n": 2} by hand: moestat's writer never makes one.
  const std::string pickle = "\x80\x02}(X\x01\x00\x00\x00nK\x01X\x01\x00\x00\x00nK\x02u."s;
  const std::vector<io::detail::ZipRecord> records = {
      {"x/data.pkl", std::as_bytes(std::span<const char>(pickle.data(), pickle.size()))}};
  write_bytes(dir.path() / "keys.pt", io::detail::zip_archive(records));
  const CliRun run = run_cli("inspect " + quoted(dir.path() / "keys.pt"));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, "keys.pt: ")) << run.err;
  EXPECT_TRUE(contains(run.err, "key \"n\" more than once: ambiguous")) << run.err;
}

// ---- item 10: terminal escapes ----

TEST(CliEscapes, InspectShowsKeysAndStringsOfAFileEscaped) {
  ScratchDir dir;
  const auto path = dir.path() / "keys.pt";
  const std::string key = "\x1b[2J\x1b]0;pwned\x07";
  io::write_pt_file(path,
                    io::PtValue(io::PtDict{{io::PtValue(key), io::PtValue("\x1b[31mred\xc2\x9b")},
                                           {io::PtValue("plain"), io::PtValue(std::int64_t{1})}}));
  const CliRun text = run_cli("inspect " + quoted(path));
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_EQ(first_unprintable(text.out), -1) << text.out;
  EXPECT_TRUE(
      contains(text.out, "[\"\\x1b[2J\\x1b]0;pwned\\x07\"]: str \"\\x1b[31mred\\xc2\\x9b\""))
      << text.out;
  EXPECT_TRUE(contains(text.out, "[\"plain\"]: int 1")) << text.out;
  const CliRun json = run_cli("inspect --json " + quoted(path));
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_EQ(first_unprintable(json.out), -1) << json.out;
}

// Issue 29, item 5: inspect called a mask of 0/1 integers "not a moestat document".
TEST(CliMessages, InspectSaysWhatIsWrongWithAMaskOfIntegers) {
  ScratchDir dir;
  write_bytes(dir.path() / "mask.json", R"({"gpu_experts_masks": [[1, 0], [0, 1]]})");
  const CliRun run = run_cli("inspect " + quoted(dir.path() / "mask.json"));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, "gpu_experts_masks[0][0] is 1, expected true or false")) << run.err;
  // A file of no kind at all is still told what kinds there are.
  write_bytes(dir.path() / "other.json", R"({"x": 1})");
  const CliRun other = run_cli("inspect " + quoted(dir.path() / "other.json"));
  EXPECT_EQ(other.code, 1);
  EXPECT_TRUE(contains(other.err, "not a moestat document")) << other.err;
}

TEST(CliEscapes, ErrorsQuoteNoRawByteOfTheFile) {
  ScratchDir dir;
  // Bytes that would clear the screen and set the title, then bytes that are not UTF-8.
  const std::string hostile = "\x1b[2J\x1b]0;pwned\x07\xff\xfe\x80"s;
  write_bytes(dir.path() / "random.json", hostile);
  write_bytes(dir.path() / "random", hostile);
  write_bytes(dir.path() / "random.pt", hostile);
  for (const std::string name : {"random.json", "random", "random.pt"}) {
    const CliRun run = run_cli("inspect " + quoted(dir.path() / name));
    EXPECT_EQ(run.code, 1) << name;
    EXPECT_EQ(first_unprintable(run.err), -1) << run.err;
    EXPECT_TRUE(contains(run.err, name + ": ")) << run.err;
  }
}

// ---- item 11: the format that failed, and why ----

TEST(CliFormats, EachDamagedFormatIsRefusedByItsOwnReader) {
  ScratchDir dir;
  // torch.save(..., _use_new_zipfile_serialization=False): PROTO 2, then its magic number.
  write_bytes(dir.path() / "old.pt",
              "\x80\x02\x8a\x0al\xfc\x9c"
              "F\xf9 j\xa8P\x19.\x80\x02."s);
  std::string safetensors(8, '\0');
  const std::uint64_t claimed = 1 << 20;
  std::memcpy(safetensors.data(), &claimed, 8);
  write_bytes(dir.path() / "bad.safetensors", safetensors + "{\"t\": {}}");
  {
    io::TraceWriter writer(
        dir.path() / "bad.trace",
        {.num_layers = 1, .num_logical_experts = 2, .num_physical_experts = 2, .top_k = 1});
  }
  std::string trace = read_whole_file(dir.path() / "bad.trace");
  trace.replace(0, 8, "MOETRACX");
  write_bytes(dir.path() / "bad.trace", trace);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"old.pt", "a legacy torch.save file (a bare pickle, protocol 2, no zip signature"},
      {"bad.safetensors", "not a safetensors file: header of 1048576 bytes in a file of 17"},
      {"bad.trace", "is not a moestat trace file (bad magic"},
  };
  for (const auto& [name, why] : expected) {
    const CliRun run = run_cli("inspect " + quoted(dir.path() / name));
    EXPECT_EQ(run.code, 1) << name;
    EXPECT_TRUE(contains(run.err, name)) << run.err;
    EXPECT_TRUE(contains(run.err, why)) << run.err;
    EXPECT_FALSE(contains(run.err, "JSON")) << run.err;
  }
}

}  // namespace
}  // namespace moestat
