// read_text_file, write_file_atomically and read_document: contents, replacement, and that a
// failed write names the path and leaves nothing behind.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <moestat/io/counts_json.hpp>
#include <moestat/io/document.hpp>
#include <moestat/io/files.hpp>
#include <string>

#include "io/test_support.hpp"

namespace moestat {
namespace {

using test::expect_error;
using test::ScratchDir;

// ---- Naive reference ----

std::string naive_read(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void naive_write(const std::filesystem::path& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

TEST(WriteFileAtomically, WritesAndReplacesLeavingOnlyTheFile) {
  ScratchDir dir;
  const auto path = dir.path() / "out.json";
  io::write_file_atomically(path, "first");
  EXPECT_EQ(naive_read(path), "first");
  std::string big(3 << 20, 'x');  // several write() calls' worth
  big[12345] = '\0';              // binary-safe
  io::write_file_atomically(path, big);
  EXPECT_EQ(naive_read(path), big);
  io::write_file_atomically(path, "");
  EXPECT_EQ(naive_read(path), "");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.json"});
}

TEST(WriteFileAtomically, NewFilesGetTheUsualPermissions) {
  ScratchDir dir;
  const auto path = dir.path() / "perm.json";
  const mode_t old_mask = ::umask(022);
  io::write_file_atomically(path, "x");
  ::umask(old_mask);
  struct stat info {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0644u);
}

TEST(WriteFileAtomically, RelativePathsUseTheCurrentDirectory) {
  ScratchDir dir;
  const auto old = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  io::write_file_atomically("relative.json", "r");
  std::filesystem::current_path(old);
  EXPECT_EQ(naive_read(dir.path() / "relative.json"), "r");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"relative.json"});
}

TEST(WriteFileAtomically, ParentIsARegularFile) {
  ScratchDir dir;
  naive_write(dir.path() / "plain", "keep");
  const auto path = dir.path() / "plain" / "out.json";
  expect_error([&] { io::write_file_atomically(path, "data"); },
               {"cannot write", path.string(), "is not a directory"});
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"plain"});
  EXPECT_EQ(naive_read(dir.path() / "plain"), "keep");
}

TEST(WriteFileAtomically, MissingDirectory) {
  ScratchDir dir;
  const auto path = dir.path() / "missing" / "out.json";
  expect_error([&] { io::write_file_atomically(path, "data"); },
               {path.string(), "No such file or directory"});
  EXPECT_TRUE(dir.entries().empty());
}

TEST(WriteFileAtomically, TargetIsADirectoryLeavesNoTemporaryFile) {
  // The temporary file is created and written; the rename fails; it must be removed.
  ScratchDir dir;
  std::filesystem::create_directory(dir.path() / "taken");
  naive_write(dir.path() / "taken" / "inside", "x");
  expect_error([&] { io::write_file_atomically(dir.path() / "taken", "data"); },
               {(dir.path() / "taken").string()});
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"taken"});
}

TEST(WriteFileAtomically, ReadOnlyDirectory) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only directories";
  ScratchDir dir;
  std::filesystem::permissions(
      dir.path(), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  const auto path = dir.path() / "out.json";
  expect_error([&] { io::write_file_atomically(path, "data"); },
               {path.string(), "Permission denied"});
  std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(WriteFileAtomically, EmptyPath) {
  expect_error([] { io::write_file_atomically("", "x"); }, {"not a file path"});
}

TEST(ReadTextFile, ReadsWholeFiles) {
  ScratchDir dir;
  std::string contents(200000, 'a');
  contents += "\nend\0tail";
  naive_write(dir.path() / "in.txt", contents);
  EXPECT_EQ(io::read_text_file(dir.path() / "in.txt"), contents);
  naive_write(dir.path() / "empty.txt", "");
  EXPECT_EQ(io::read_text_file(dir.path() / "empty.txt"), "");
}

TEST(ReadTextFile, ErrorsNameThePath) {
  ScratchDir dir;
  const auto missing = dir.path() / "missing.json";
  expect_error([&] { io::read_text_file(missing); },
               {"cannot read", missing.string(), "No such file or directory"});
  expect_error([&] { io::read_text_file(dir.path()); }, {dir.path().string(), "Is a directory"});
}

TEST(ReadTextFile, RefusesDevicesFifosAndFilesBeyondTheBound) {
  // Issue 14: /dev/zero grew until allocation failed, a FIFO without a writer blocked.
  expect_error([] { io::read_text_file("/dev/zero"); },
               {"cannot read /dev/zero: a character device, not a regular file"});
  expect_error([] { io::read_text_file("/dev/null"); }, {"a character device"});
  ScratchDir dir;
  const auto fifo = dir.path() / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_error([&] { io::read_text_file(fifo); }, {fifo.string(), "a FIFO, not a regular file"});
  // Sparse: no disk and no time, refused from its size before a byte is read.
  const auto big = dir.path() / "big.json";
  naive_write(big, "");
  std::filesystem::resize_file(big, io::kMaxFileBytes + 1);
  expect_error([&] { io::read_text_file(big); },
               {big.string(), "4294967297 bytes, more than moestat reads"});
}

TEST(ReadDocument, ErrorsStartWithThePath) {
  ScratchDir dir;
  const auto path = dir.path() / "bad.json";
  naive_write(path, "{\"logical_count\": [[1, -1]]}");
  expect_error([&] { io::read_document(path); }, {path.string() + ": logical_count[0][1] is -1"});
  expect_error([&] { io::read_document(dir.path() / "none.json"); }, {"none.json"});
}

TEST(ReadDocument, ReadsWhatWasWritten) {
  ScratchDir dir;
  CountWindow counts;
  counts.num_layers = 1;
  counts.num_experts = 3;
  counts.counts = {4, 0, 9};
  io::write_file_atomically(dir.path() / "c.json", io::logical_counts_to_json(counts));
  const io::Document document = io::read_document(dir.path() / "c.json");
  ASSERT_EQ(io::document_kind(document), io::DocumentKind::kLogicalCounts);
  EXPECT_EQ(std::get<CountWindow>(document), counts);
}

}  // namespace
}  // namespace moestat
