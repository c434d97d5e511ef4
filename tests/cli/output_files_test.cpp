// What the `moestat` binary writes, and what it refuses to write (docs/cli.md, "Output files"):
// every output checked before any is written, an input never overwritten, integers never
// clamped, and no temporary file left by a failure, SIGINT or SIGTERM (a kill -9 leaves one,
// which the next write of the same file sweeps).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <moestat/io/statistics.hpp>
#include <string>
#include <vector>

#include "cli/cli_run.hpp"
#include "io/test_support.hpp"

namespace moestat {
namespace {

namespace fs = std::filesystem;
using test::CliRun;
using test::contains;
using test::quoted;
using test::read_whole_file;
using test::run_cli;
using test::ScratchDir;

/// Logical counts [2 passes][2 layers][3 experts] numbered from `first`.
CountWindow counts_from(std::int64_t first) {
  CountWindow counts{
      .window_size = 2, .num_layers = 2, .num_experts = 3, .has_window_axis = true, .counts = {}};
  for (std::int64_t i = 0; i < 12; ++i) counts.counts.push_back(first + i);
  return counts;
}

/// Names in `dir` that look like a temporary file of an atomic write.
std::vector<std::string> temporaries_in(const ScratchDir& dir) {
  std::vector<std::string> out;
  for (const std::string& name : dir.entries()) {
    if (contains(name, ".tmp-")) out.push_back(name);
  }
  return out;
}

/// The CLI with the fsync shim preloaded in `fsync_mode` (tests/cli/fsync_shim.cpp), started
/// in a child process whose pid is returned; stdout and stderr go to /dev/null.
pid_t spawn_cli_with_shim(const std::string& fsync_mode, const std::vector<std::string>& args) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::setenv("LD_PRELOAD", MOESTAT_FSYNC_SHIM_PATH, 1);
  ::setenv("MOESTAT_TEST_FSYNC", fsync_mode.c_str(), 1);
  ::setenv("ASAN_OPTIONS", "verify_asan_link_order=0:detect_leaks=0", 1);
  std::freopen("/dev/null", "w", stdout);
  std::freopen("/dev/null", "w", stderr);
  std::vector<char*> argv{const_cast<char*>(MOESTAT_CLI_PATH)};
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  ::execv(MOESTAT_CLI_PATH, argv.data());
  ::_exit(127);
}

/// Waits for `pid` to stop or end; the raw wait status.
int wait_for(pid_t pid, int flags = 0) {
  int status = 0;
  while (::waitpid(pid, &status, flags) < 0 && errno == EINTR) {
  }
  return status;
}

/// Sets a file's modification time `age` into the past.
void age_file(const fs::path& path, std::chrono::seconds age) {
  fs::last_write_time(path, fs::file_time_type::clock::now() - age);
}

/// A process id that is not alive: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  wait_for(pid);
  return pid;
}

// ---- item 13: the command line ----

TEST(CliOutputs, VersionTakesNoOtherArguments) {
  EXPECT_EQ(run_cli("--version").code, 0);
  const CliRun run = run_cli("--version extra");
  EXPECT_EQ(run.code, 2) << run.out;
  EXPECT_TRUE(contains(run.err, "--version takes no other arguments")) << run.err;
  EXPECT_EQ(run_cli("extra --version").code, 2);
}

TEST(CliOutputs, IntegersBeyondSixtyFourBitsAreUsageErrors) {
  ScratchDir dir;
  const std::string out = "--out " + quoted(dir.path() / "demo");
  for (const std::string& args :
       {"demo --seed 18446744073709551616 " + out, "demo --seed -1 " + out,
        "demo --passes 99999999999999999999 " + out,
        std::string("plan --stats a.json --replicas 8 --gpus 9223372036854775808 --out p.json"),
        std::string("hot-experts --stats a.json --strategy random --per-layer 1 --seed -1 "
                    "--out m.json"),
        std::string("hot-experts --stats a.json --strategy random --per-layer 1 --seed "
                    "18446744073709551616 --out m.json")}) {
    SCOPED_TRACE(args);
    const CliRun run = run_cli(args);
    EXPECT_EQ(run.code, 2) << run.out << run.err;
    EXPECT_TRUE(contains(run.err, "out of range") || contains(run.err, "not in range") ||
                contains(run.err, "must be 0 or more"))
        << run.err;
  }
  EXPECT_TRUE(dir.entries().empty());
  // The largest seed is a seed like any other.
  const CliRun largest =
      run_cli("demo --preset mixtral-8x7b --passes 1 --seed 18446744073709551615 " + out);
  EXPECT_EQ(largest.code, 0) << largest.err;
  EXPECT_TRUE(contains(largest.out, "seed 18446744073709551615")) << largest.out;
}

TEST(CliMerge, RefusesAnOutputThatExistsUnlessForced) {
  ScratchDir dir;
  io::write_counts(dir.path() / "a.json", counts_from(0));
  io::write_counts(dir.path() / "b.json", counts_from(100));
  const std::string before = read_whole_file(dir.path() / "a.json");
  // The user forgot OUT: a.json would have been overwritten with b.json's counts.
  const CliRun forgot =
      run_cli("merge " + quoted(dir.path() / "a.json") + " " + quoted(dir.path() / "b.json"));
  EXPECT_EQ(forgot.code, 1);
  EXPECT_TRUE(contains(forgot.err, "a.json exists; give --force")) << forgot.err;
  EXPECT_EQ(read_whole_file(dir.path() / "a.json"), before);

  io::write_counts(dir.path() / "out.json", counts_from(7));
  const CliRun forced =
      run_cli("merge --force " + quoted(dir.path() / "out.json") + " " +
              quoted(dir.path() / "a.json") + " " + quoted(dir.path() / "b.json"));
  ASSERT_EQ(forced.code, 0) << forced.err;
  EXPECT_EQ(io::read_counts(dir.path() / "out.json").counts[0], 0 + 100);
}

TEST(CliMerge, RefusesAnOutputThatIsAlsoAnInputEvenWhenForced) {
  ScratchDir dir;
  io::write_counts(dir.path() / "a.json", counts_from(0));
  io::write_counts(dir.path() / "b.json", counts_from(100));
  fs::create_hard_link(dir.path() / "a.json", dir.path() / "hard.json");
  fs::create_symlink("a.json", dir.path() / "link.json");
  const std::string before = read_whole_file(dir.path() / "a.json");
  // A symbolic link to an input is refused as that input (merge compares the inputs first);
  // no output is ever written through a link (CliOutputs.ASymbolicLinkIsRefused...).
  for (const char* out : {"a.json", "hard.json", "link.json"}) {
    SCOPED_TRACE(out);
    const CliRun run = run_cli("merge --force " + quoted(dir.path() / out) + " " +
                               quoted(dir.path() / "a.json") + " " + quoted(dir.path() / "b.json"));
    EXPECT_EQ(run.code, 1);
    EXPECT_TRUE(contains(run.err, "is also an input")) << run.err;
    EXPECT_EQ(read_whole_file(dir.path() / "a.json"), before);
  }
}

// Issue 29, item 2: plan --out onto its --stats replaced the counts with a placement, and
// likewise hot-experts, report and convert. Every command that writes refuses an output that
// is one of its inputs, also through a hard link, and leaves the input as it was.
TEST(CliOutputs, NoCommandWritesOverItsInput) {
  ScratchDir dir;
  io::write_counts(dir.path() / "s.json", counts_from(3));
  fs::create_hard_link(dir.path() / "s.json", dir.path() / "hard.json");
  const std::string before = read_whole_file(dir.path() / "s.json");
  const std::string in = quoted(dir.path() / "s.json");
  for (const char* name : {"s.json", "hard.json"}) {
    const std::string out = quoted(dir.path() / name);
    for (const std::string& args :
         {"plan --stats " + in + " --replicas 4 --gpus 2 --out " + out,
          "hot-experts --stats " + in + " --strategy uniform --per-layer 1 --out " + out,
          "report " + in + " --gpus 1 --html " + out, "report " + in + " --png " + out,
          "convert " + in + " " + out}) {
      SCOPED_TRACE(args);
      const CliRun run = run_cli(args);
      EXPECT_EQ(run.code, 1) << run.out << run.err;
      EXPECT_TRUE(contains(run.err, "is also an input")) << run.err;
      EXPECT_EQ(read_whole_file(dir.path() / "s.json"), before);
    }
  }
}

// ---- item 12: outputs checked first, modes kept ----

TEST(CliOutputs, ReportChecksEveryOutputBeforeWritingAny) {
  ScratchDir dir;
  io::write_counts(dir.path() / "counts.json", counts_from(1));
  fs::create_directory(dir.path() / "a-directory.png");
  const std::string html = "--html " + quoted(dir.path() / "a.html");
  // A directory that cannot be made (its parent is a file), and a directory in the way.
  for (const std::string& png : {(dir.path() / "counts.json" / "x.png").string(),
                                 (dir.path() / "a-directory.png").string()}) {
    SCOPED_TRACE(png);
    const CliRun run = run_cli("report " + quoted(dir.path() / "counts.json") + " --gpus 1 " +
                               html + " --png " + quoted(fs::path(png)));
    EXPECT_EQ(run.code, 1) << run.err;
    EXPECT_TRUE(contains(run.err, png)) << run.err;
    EXPECT_FALSE(fs::exists(dir.path() / "a.html"));
  }
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a-directory.png", "counts.json"}));
}

// Issue 42, item 5: `report --html dir/x.html` failed when dir/ was missing, while `--svg DIR`
// made its directory. Every output's missing directories are made, and removed again (with
// what was written in them) when the command fails.
TEST(CliOutputs, MissingDirectoriesOfOutputsAreMadeAndRemovedOnFailure) {
  ScratchDir dir;
  const fs::path counts = dir.path() / "counts.json";
  io::write_counts(counts, counts_from(1));
  const fs::path html = dir.path() / "new" / "deeper" / "r.html";
  const fs::path png = dir.path() / "new" / "r.png";
  const std::string outputs = fmt::format("--html {} --png {}", quoted(html), quoted(png));

  // --gpus 2 does not divide the 3 experts: refused after the directories were made.
  CliRun run = run_cli(fmt::format("report {} --gpus 2 {}", quoted(counts), outputs));
  EXPECT_EQ(run.code, 1) << run.err;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"counts.json"});

  run = run_cli(fmt::format("report {} --gpus 1 {}", quoted(counts), outputs));
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_TRUE(fs::is_regular_file(html));
  EXPECT_TRUE(fs::is_regular_file(png));

  const fs::path placement = dir.path() / "plans" / "p.json";
  run = run_cli(fmt::format("plan --stats {} --replicas 6 --gpus 3 --out {}", quoted(counts),
                            quoted(placement)));
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_TRUE(fs::is_regular_file(placement));
  const fs::path merged = dir.path() / "merged" / "m.json";
  run = run_cli(fmt::format("merge {} {} {}", quoted(merged), quoted(counts), quoted(counts)));
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_TRUE(fs::is_regular_file(merged));
  const fs::path converted = dir.path() / "converted" / "c.pt";
  run = run_cli(fmt::format("convert {} {}", quoted(counts), quoted(converted)));
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_TRUE(fs::is_regular_file(converted));

  // hot-experts --out too (it checked the path only, and failed on a missing directory).
  const fs::path mask = dir.path() / "masks" / "deeper" / "m.json";
  const std::string hot = fmt::format("hot-experts --stats {} --strategy frequency --out {} ",
                                      quoted(counts), quoted(mask));
  run = run_cli(hot + "--per-layer 4");  // more than the 3 experts: refused, nothing left
  EXPECT_EQ(run.code, 1) << run.err;
  EXPECT_FALSE(fs::exists(dir.path() / "masks"));
  run = run_cli(hot + "--per-layer 1");
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_TRUE(fs::is_regular_file(mask));
}

TEST(CliOutputs, NonRegularTargetsAreRefusedNotReplaced) {
  ScratchDir dir;
  io::write_counts(dir.path() / "in.json", counts_from(1));
  const fs::path fifo = dir.path() / "out.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const CliRun run = run_cli("convert " + quoted(dir.path() / "in.json") + " " + quoted(fifo));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, "not a regular file")) << run.err;
  EXPECT_TRUE(fs::is_fifo(fifo));
}

TEST(CliOutputs, OverwriteKeepsTheMode) {
  ScratchDir dir;
  io::write_counts(dir.path() / "in.json", counts_from(1));
  io::write_counts(dir.path() / "out.json", counts_from(50));
  ASSERT_EQ(::chmod((dir.path() / "out.json").c_str(), 0604), 0);
  const CliRun run =
      run_cli("convert " + quoted(dir.path() / "in.json") + " " + quoted(dir.path() / "out.json"));
  ASSERT_EQ(run.code, 0) << run.err;
  struct stat status {};
  ASSERT_EQ(::stat((dir.path() / "out.json").c_str(), &status), 0);
  EXPECT_EQ(status.st_mode & 07777, 0604u);
  EXPECT_EQ(io::read_counts(dir.path() / "out.json"), counts_from(1));
  EXPECT_TRUE(temporaries_in(dir).empty());
}

// Issue 29, item 2: a link to a system file was followed (as root) and the file replaced.
TEST(CliOutputs, ASymbolicLinkIsRefusedAndNeitherItNorItsTargetChanges) {
  ScratchDir dir;
  io::write_counts(dir.path() / "in.json", counts_from(1));
  fs::create_directory(dir.path() / "real");
  io::write_counts(dir.path() / "real" / "target.json", counts_from(50));
  const std::string before = read_whole_file(dir.path() / "real" / "target.json");
  fs::create_symlink("real/target.json", dir.path() / "link.json");
  fs::create_symlink("real/missing.json", dir.path() / "dangling.json");
  for (const char* out : {"link.json", "dangling.json"}) {
    SCOPED_TRACE(out);
    const CliRun run =
        run_cli("convert " + quoted(dir.path() / "in.json") + " " + quoted(dir.path() / out));
    EXPECT_EQ(run.code, 1);
    EXPECT_TRUE(contains(run.err, "is a symbolic link")) << run.err;
    EXPECT_TRUE(fs::is_symlink(dir.path() / out));
  }
  EXPECT_EQ(read_whole_file(dir.path() / "real" / "target.json"), before);
  EXPECT_FALSE(fs::exists(dir.path() / "real" / "missing.json"));
  EXPECT_TRUE(temporaries_in(dir).empty());
}

// Issue 39, item 10: root's convert into /tmp/sticky/dirlink/file.json, dirlink another
// user's link to a directory, replaced the file in the link's target.
TEST(CliOutputs, AnotherUsersLinkInAStickySharedDirectoryIsNotFollowed) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a link to another user (lchown) needs root";
  ScratchDir dir;
  io::write_counts(dir.path() / "in.json", counts_from(1));
  fs::create_directory(dir.path() / "victim");
  io::write_counts(dir.path() / "victim" / "file.json", counts_from(50));
  const std::string before = read_whole_file(dir.path() / "victim" / "file.json");
  const fs::path sticky = dir.path() / "sticky";
  fs::create_directory(sticky);
  ASSERT_EQ(::chmod(sticky.c_str(), 01777), 0);
  fs::create_directory_symlink(dir.path() / "victim", sticky / "dirlink");
  ASSERT_EQ(::lchown((sticky / "dirlink").c_str(), 65534, 65534), 0);
  const CliRun run = run_cli("convert " + quoted(dir.path() / "in.json") + " " +
                             quoted(sticky / "dirlink" / "file.json"));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, (sticky / "dirlink").string() + " is a symbolic link")) << run.err;
  EXPECT_TRUE(contains(run.err, "owned by user 65534")) << run.err;
  EXPECT_EQ(read_whole_file(dir.path() / "victim" / "file.json"), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path() / "victim"), {}), 1);  // no temporary
}

// ---- item 12: temporary files on signals and crashes ----

TEST(CliOutputs, SigintAndSigtermRemoveTheTemporaryFileBeingWritten) {
  for (const int signal : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(signal);
    ScratchDir dir;
    io::write_counts(dir.path() / "in.json", counts_from(1));
    const pid_t pid = spawn_cli_with_shim(
        "stop", {"convert", (dir.path() / "in.json").string(), (dir.path() / "out.pt").string()});
    // Stopped just before fsync: the temporary file is written and not yet renamed.
    const int stopped = wait_for(pid, WUNTRACED);
    ASSERT_TRUE(WIFSTOPPED(stopped));
    EXPECT_EQ(temporaries_in(dir).size(), 1u);
    ::kill(pid, signal);
    ::kill(pid, SIGCONT);
    const int status = wait_for(pid);
    ASSERT_TRUE(WIFSIGNALED(status));
    EXPECT_EQ(WTERMSIG(status), signal);
    EXPECT_EQ(dir.entries(), (std::vector<std::string>{"in.json"}));
  }
}

TEST(CliOutputs, TheNextWriteSweepsWhatAKilledWriterLeft) {
  ScratchDir dir;
  io::write_counts(dir.path() / "in.json", counts_from(1));
  const std::vector<std::string> args{"convert", (dir.path() / "in.json").string(),
                                      (dir.path() / "out.pt").string()};
  const pid_t pid = spawn_cli_with_shim("stop", args);
  ASSERT_TRUE(WIFSTOPPED(wait_for(pid, WUNTRACED)));
  ::kill(pid, SIGKILL);
  ASSERT_TRUE(WIFSIGNALED(wait_for(pid)));
  const std::vector<std::string> left = temporaries_in(dir);
  ASSERT_EQ(left.size(), 1u);

  // Its writer is dead, but a minute has not passed: it could be another machine's.
  ASSERT_EQ(run_cli("convert " + quoted(fs::path(args[1])) + " " + quoted(fs::path(args[2]))).code,
            0);
  EXPECT_EQ(temporaries_in(dir), left);
  age_file(dir.path() / left[0], std::chrono::seconds(120));
  ASSERT_EQ(run_cli("convert " + quoted(fs::path(args[1])) + " " + quoted(fs::path(args[2]))).code,
            0);
  EXPECT_TRUE(temporaries_in(dir).empty());
}

TEST(CliOutputs, TheSweepTakesOnlyStaleTemporariesOfTheSameTarget) {
  ScratchDir dir;
  io::write_counts(dir.path() / "in.json", counts_from(1));
  const pid_t alive = ::getpid(), dead = dead_pid();
  const auto make = [&](const std::string& name, std::chrono::seconds age) {
    std::ofstream(dir.path() / name) << "partial";
    age_file(dir.path() / name, age);
  };
  const std::chrono::seconds minute(60), day(24 * 3600);
  make(fmt::format(".out.json.tmp-{}-0-1f", alive), 2 * minute);              // writing: kept
  make(fmt::format(".out.json.tmp-{}-1-1f", alive), day + minute);            // a day old: swept
  make(fmt::format(".out.json.tmp-{}-2-1f", dead), 2 * minute);               // writer gone: swept
  make(fmt::format(".out.json.tmp-{}-3-1f", dead), std::chrono::seconds(5));  // kept a minute
  make(fmt::format(".other.json.tmp-{}-0-1f", dead), day + minute);  // another target: kept
  make(".out.json.tmp-notes", day + minute);                         // not our name: kept
  fs::create_directory(dir.path() / fmt::format(".out.json.tmp-{}-4-1f", dead));  // not a file
  age_file(dir.path() / fmt::format(".out.json.tmp-{}-4-1f", dead), day + minute);

  const CliRun run =
      run_cli("convert " + quoted(dir.path() / "in.json") + " " + quoted(dir.path() / "out.json"));
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(
      dir.entries(),
      (std::vector<std::string>{
          fmt::format(".other.json.tmp-{}-0-1f", dead), fmt::format(".out.json.tmp-{}-0-1f", alive),
          fmt::format(".out.json.tmp-{}-3-1f", dead), fmt::format(".out.json.tmp-{}-4-1f", dead),
          ".out.json.tmp-notes", "in.json", "out.json"}));
}

// ---- item 12: the demo's directory ----

TEST(CliDemo, AFailedDemoRemovesTheDirectoryItCreated) {
  ScratchDir dir;
  const fs::path out = dir.path() / "new" / "sub";
  // The third file's fsync fails: two files are written by then.
  const pid_t pid = spawn_cli_with_shim(
      "fail-after-2", {"demo", "--preset", "mixtral-8x7b", "--passes", "2", "--out", out.string()});
  const int status = wait_for(pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(CliDemo, AFailedDemoKeepsADirectoryThatWasThereAndWritesNothingWhenAnOutputIsBlocked) {
  ScratchDir dir;
  std::ofstream(dir.path() / "mine.txt") << "keep";
  fs::create_directory(dir.path() / "report.html");
  const CliRun run = run_cli("demo --preset mixtral-8x7b --passes 2 --out " + quoted(dir.path()));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, "report.html: it is a directory")) << run.err;
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"mine.txt", "report.html"}));
}

}  // namespace
}  // namespace moestat
