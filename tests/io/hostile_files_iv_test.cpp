// Where io::write_file_atomically writes (issue 39, item 10): the output's directory is opened
// name by name, and a symbolic link that another user keeps in a sticky directory anyone may
// write to (/tmp) is not followed, as the kernel's protected_symlinks rule has it; every other
// path (plain, relative, through links of one's own) is written as before, atomically.
// The hostile links need root (to give a link to another user with lchown); those tests skip
// without it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <moestat/io/files.hpp>
#include <moestat/io/output_file.hpp>
#include <moestat/io/trace_file.hpp>
#include <string>
#include <vector>

#include "io/test_support.hpp"

namespace moestat {
namespace {

namespace fs = std::filesystem;
using test::expect_error;
using test::ScratchDir;

constexpr uid_t kOtherUser = 65534;  // nobody

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_plain(const fs::path& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

/// The names in `directory`, sorted.
std::vector<std::string> entries_of(const fs::path& directory) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

/// A directory like /tmp: world-writable, sticky, owned by `owner`.
fs::path make_sticky_directory(const fs::path& path, uid_t owner) {
  fs::create_directory(path);
  EXPECT_EQ(::chmod(path.c_str(), 01777), 0);
  EXPECT_EQ(::chown(path.c_str(), owner, owner), 0);
  return path;
}

/// A symbolic link at `link` to `target`, owned by `owner`.
void make_link(const fs::path& target, const fs::path& link, uid_t owner) {
  fs::create_directory_symlink(target, link);
  EXPECT_EQ(::lchown(link.c_str(), owner, owner), 0);
}

/// A scratch directory holding `victim/file.json` ("keep") and a sticky shared directory
/// `sticky`, owned by root as /tmp is.
class HostileLinks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "giving a link to another user (lchown) needs root";
    fs::create_directory(victim());
    write_plain(victim() / "file.json", "keep");
    make_sticky_directory(sticky(), 0);
  }

  fs::path victim() const { return scratch_.path() / "victim"; }
  fs::path sticky() const { return scratch_.path() / "sticky"; }

  /// That nothing was written in the victim's directory, nor left in `also`.
  void expect_untouched(const fs::path& also) {
    EXPECT_EQ(read_file(victim() / "file.json"), "keep");
    EXPECT_EQ(entries_of(victim()), std::vector<std::string>{"file.json"});
    for (const std::string& name : entries_of(also)) {
      EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name;
    }
  }

 private:
  ScratchDir scratch_;
};

// Root's `moestat convert ... /tmp/sticky/dirlink/file.json` replaced the link's target's file.
TEST_F(HostileLinks, AnotherUsersDirectoryLinkInAStickySharedDirectoryIsNotFollowed) {
  make_link(victim(), sticky() / "dirlink", kOtherUser);
  const fs::path output = sticky() / "dirlink" / "file.json";
  // Checked before writing, and when writing.
  for (const std::function<void()>& write :
       {std::function<void()>([&] { io::check_output_path(output); }),
        std::function<void()>([&] { io::write_file_atomically(output, "x"); })}) {
    expect_error(write, {output.string(), (sticky() / "dirlink").string(), "is a symbolic link",
                         "owned by user 65534", "a sticky directory anyone may write to",
                         "protected_symlinks"});
  }
  expect_untouched(sticky());
  EXPECT_TRUE(fs::is_symlink(sticky() / "dirlink"));
}

TEST_F(HostileLinks, TraceFilesAreWrittenUnderTheSameRule) {
  // A trace file is written where it lies (io::open_output_in_place), not renamed into place:
  // its directory is walked the same way.
  make_link(victim(), sticky() / "dirlink", kOtherUser);
  const io::TraceHeader header{
      .num_layers = 1, .num_logical_experts = 2, .num_physical_experts = 2, .top_k = 1};
  expect_error([&] { io::TraceWriter(sticky() / "dirlink" / "file.json", header); },
               {"is a symbolic link", "owned by user 65534", "protected_symlinks"});
  expect_untouched(sticky());
}

TEST_F(HostileLinks, AHostileLinkIsRefusedWhereverTheWalkMeetsIt) {
  // Reached through a link of one's own, and further down through a relative link.
  make_link(victim(), sticky() / "dirlink", kOtherUser);
  const fs::path own = sticky().parent_path() / "own";
  make_link(sticky() / "dirlink", own, 0);
  expect_error([&] { io::write_file_atomically(own / "file.json", "x"); },
               {"is a symbolic link", "owned by user 65534"});
  fs::create_directory(sticky() / "mine");
  make_link("../dirlink", sticky() / "mine" / "up", 0);
  expect_error([&] { io::write_file_atomically(sticky() / "mine" / "up" / "file.json", "x"); },
               {"is a symbolic link", "owned by user 65534"});
  expect_untouched(sticky());
}

TEST_F(HostileLinks, LinksTheRuleTrustsAreFollowed) {
  // One's own link in the sticky directory.
  make_link(victim(), sticky() / "mine", 0);
  io::write_file_atomically(sticky() / "mine" / "a.json", "a");
  EXPECT_EQ(read_file(victim() / "a.json"), "a");
  // Another user's link in a sticky directory that user owns.
  const fs::path theirs = make_sticky_directory(sticky() / "theirs", kOtherUser);
  make_link(victim(), theirs / "link", kOtherUser);
  io::write_file_atomically(theirs / "link" / "b.json", "b");
  EXPECT_EQ(read_file(victim() / "b.json"), "b");
  // Another user's link outside a sticky shared directory: the kernel follows it too.
  const fs::path plain = sticky().parent_path() / "plain";
  fs::create_directory(plain);
  make_link(victim(), plain / "link", kOtherUser);
  io::write_file_atomically(plain / "link" / "c.json", "c");
  EXPECT_EQ(read_file(victim() / "c.json"), "c");
  EXPECT_EQ(read_file(victim() / "file.json"), "keep");
  EXPECT_EQ(entries_of(victim()),
            (std::vector<std::string>{"a.json", "b.json", "c.json", "file.json"}));
}

// ---- Paths without hostile links: written as before ----

TEST(OutputDirectory, RelativePathsWithDotsAndRepeatedSlashes) {
  ScratchDir dir;
  fs::create_directories(dir.path() / "a" / "b");
  const fs::path old = fs::current_path();
  fs::current_path(dir.path());
  io::write_file_atomically("a/b/../b//./one.json", "1");
  io::write_file_atomically("./two.json", "2");
  io::write_file_atomically("three.json", "3");
  fs::current_path(old);
  EXPECT_EQ(read_file(dir.path() / "a" / "b" / "one.json"), "1");
  EXPECT_EQ(read_file(dir.path() / "two.json"), "2");
  EXPECT_EQ(read_file(dir.path() / "three.json"), "3");
  EXPECT_EQ(entries_of(dir.path()), (std::vector<std::string>{"a", "three.json", "two.json"}));
}

TEST(OutputDirectory, ThroughLinksOfOnesOwnAbsoluteAndRelative) {
  ScratchDir dir;
  fs::create_directories(dir.path() / "real" / "inner");
  fs::create_directory_symlink(dir.path() / "real", dir.path() / "absolute");
  fs::create_directory_symlink("real/inner", dir.path() / "relative");
  fs::create_directory_symlink("absolute", dir.path() / "chain");
  io::write_file_atomically(dir.path() / "absolute" / "a.json", "a");
  io::write_file_atomically(dir.path() / "relative" / "b.json", "b");
  io::write_file_atomically(dir.path() / "chain" / "inner" / ".." / "c.json", "c");
  EXPECT_EQ(entries_of(dir.path() / "real"),
            (std::vector<std::string>{"a.json", "c.json", "inner"}));
  EXPECT_EQ(entries_of(dir.path() / "real" / "inner"), std::vector<std::string>{"b.json"});
}

TEST(OutputDirectory, AFileInTheSystemTemporaryDirectory) {
  ScratchDir dir;  // only to pick a name no one uses
  const fs::path output = fs::temp_directory_path() / (dir.path().filename().string() + ".json");
  io::write_file_atomically(output, "t");
  EXPECT_EQ(read_file(output), "t");
  io::write_file_atomically(output, "u");  // an overwrite
  EXPECT_EQ(read_file(output), "u");
  fs::remove(output);
}

TEST(OutputDirectory, LinksThatLeadNowhereAreNamed) {
  ScratchDir dir;
  write_plain(dir.path() / "file", "keep");
  fs::create_symlink("file", dir.path() / "to_file");
  fs::create_directory_symlink("missing", dir.path() / "dangling");
  fs::create_directory_symlink("loop_b", dir.path() / "loop_a");
  fs::create_directory_symlink("loop_a", dir.path() / "loop_b");
  expect_error([&] { io::write_file_atomically(dir.path() / "to_file" / "x.json", "x"); },
               {(dir.path() / "to_file").string(), "is not a directory"});
  expect_error(
      [&] { io::write_file_atomically(dir.path() / "dangling" / "x.json", "x"); },
      {(dir.path() / "dangling" / "x.json").string(), "missing", "No such file or directory"});
  expect_error([&] { io::write_file_atomically(dir.path() / "loop_a" / "x.json", "x"); },
               {(dir.path() / "loop_a" / "x.json").string(), "more than 40 symbolic links"});
  EXPECT_EQ(read_file(dir.path() / "file"), "keep");
  EXPECT_EQ(entries_of(dir.path()),
            (std::vector<std::string>{"dangling", "file", "loop_a", "loop_b", "to_file"}));
}

}  // namespace
}  // namespace moestat
