// Per-token trace files: round trips, reading while written, truncation, and refusal of
// files that are not traces or hold impossible values.
#include <fstream>
#include <moestat/io/trace_file.hpp>
#include <random>

#include "io/test_support.hpp"

// After gtest (test_support.hpp), which rapidcheck's gtest glue needs first.
#include <rapidcheck/gtest.h>

namespace moestat::test {
namespace {

constexpr io::TraceHeader kHeader{
    .num_layers = 3, .num_logical_experts = 6, .num_physical_experts = 8, .top_k = 2};
constexpr std::int64_t kTokenSize = 3 * 2;

std::vector<std::int32_t> random_tokens(std::mt19937& rng, std::int64_t tokens) {
  std::uniform_int_distribution<std::int32_t> id(-1, 7);
  std::vector<std::int32_t> ids(std::size_t(tokens * kTokenSize));
  for (auto& value : ids) value = id(rng);
  return ids;
}

TEST(TraceFile, RoundTripsEveryChunkExactly) {
  ScratchDir dir;
  const auto path = dir.path() / "trace.bin";
  std::mt19937 rng(1);
  std::vector<std::vector<std::int32_t>> written;
  {
    io::TraceWriter writer(path, kHeader);
    for (std::int64_t tokens : {5, 0, 1, 17}) {
      written.push_back(random_tokens(rng, tokens));
      writer.append(100 + tokens, std::uint64_t(tokens), written.back());
    }
  }
  const io::TraceFile file = io::read_trace_file(path);
  EXPECT_FALSE(file.truncated);
  EXPECT_EQ(file.header.num_layers, 3);
  EXPECT_EQ(file.header.top_k, 2);
  ASSERT_EQ(file.chunks.size(), written.size());
  for (std::size_t i = 0; i < written.size(); ++i) {
    EXPECT_EQ(file.chunks[i].ids, written[i]);
    EXPECT_EQ(file.chunks[i].pass_id, 100 + std::int64_t(written[i].size()) / kTokenSize);
  }
  EXPECT_EQ(file.num_tokens(), 5 + 0 + 1 + 17);
}

TEST(TraceFile, LargeChunksInTwoSpansRoundTrip) {
  ScratchDir dir;
  std::mt19937 rng(6);
  // Several megabytes in two spans, as a wrapped ring hands them over.
  const auto ids = random_tokens(rng, (std::int64_t(9) << 20) / (kTokenSize * 4) + 3);
  {
    io::TraceWriter writer(dir.path() / "large.bin", kHeader);
    const std::span<const std::int32_t> all(ids);
    writer.append(3, 1, all.first(1001 * kTokenSize), all.subspan(1001 * kTokenSize));
    writer.append(4, 1, all.first(2 * kTokenSize));
  }
  const io::TraceFile file = io::read_trace_file(dir.path() / "large.bin");
  ASSERT_EQ(file.chunks.size(), 2u);
  EXPECT_EQ(file.chunks[0].ids, ids);
  EXPECT_EQ(file.chunks[1].pass_id, 4);
}

TEST(TraceFile, SplitAppendEqualsOneSpan) {
  ScratchDir dir;
  std::mt19937 rng(2);
  const auto ids = random_tokens(rng, 9);
  {
    io::TraceWriter writer(dir.path() / "split.bin", kHeader);
    const std::span<const std::int32_t> all(ids);
    writer.append(1, 0, all.first(4 * kTokenSize), all.subspan(4 * kTokenSize));
  }
  EXPECT_EQ(io::read_trace_file(dir.path() / "split.bin").chunks.at(0).ids, ids);
}

TEST(TraceFile, IsReadableWhileWritten) {
  ScratchDir dir;
  const auto path = dir.path() / "live.bin";
  std::mt19937 rng(3);
  io::TraceWriter writer(path, kHeader);
  writer.append(0, 0, random_tokens(rng, 4));
  EXPECT_EQ(io::read_trace_file(path).num_tokens(), 4);  // flushed per chunk
  writer.append(1, 0, random_tokens(rng, 2));
  EXPECT_EQ(io::read_trace_file(path).num_tokens(), 6);
}

TEST(TraceFile, TruncatedFileReadsUpToItsLastCompleteChunk) {
  ScratchDir dir;
  const auto path = dir.path() / "cut.bin";
  std::mt19937 rng(4);
  {
    io::TraceWriter writer(path, kHeader);
    writer.append(0, 0, random_tokens(rng, 3));
    writer.append(1, 0, random_tokens(rng, 3));
  }
  const auto size = std::filesystem::file_size(path);
  for (std::uintmax_t cut : {size - 1, size - 3 * kTokenSize * 4, size - 3 * kTokenSize * 4 - 5}) {
    std::filesystem::resize_file(path, cut);
    const io::TraceFile file = io::read_trace_file(path);
    EXPECT_TRUE(file.truncated) << cut;
    EXPECT_EQ(file.chunks.size(), 1u) << cut;
  }
}

TEST(TraceFile, ChunkWhoseHeaderIsNotWrittenYetIsLeftOut) {
  ScratchDir dir;
  const auto path = dir.path() / "live.bin";
  std::mt19937 rng(5);
  {
    io::TraceWriter writer(path, kHeader);
    writer.append(0, 0, random_tokens(rng, 2));
    writer.append(1, 0, random_tokens(rng, 2));
  }
  // The writer puts a chunk's header last; until then its first bytes read as zeros.
  const auto second_chunk = std::filesystem::file_size(path) - (28 + 2 * kTokenSize * 4);
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(std::streamoff(second_chunk));
    file.write("\0\0\0\0", 4);
  }
  const io::TraceFile file = io::read_trace_file(path);
  EXPECT_TRUE(file.truncated);
  EXPECT_EQ(file.chunks.size(), 1u);
}

TEST(TraceFile, ReservedFileTakesChunksInsideAcrossAndPastItsReserve) {
  ScratchDir dir;
  const auto path = dir.path() / "reserved.bin";
  std::mt19937 rng(7);
  // A 6 MiB chunk (copied by four threads), small ones, one across the end of the 8 MiB
  // reserve and one wholly past it, with a wrapped ring's two spans among them.
  const std::int64_t big_tokens = (std::int64_t(6) << 20) / (kTokenSize * 4);
  const std::vector<std::int64_t> tokens{big_tokens, 1, 0, 40000, 50000, 3};
  std::vector<std::vector<std::int32_t>> written;
  {
    io::TraceWriter writer(path, kHeader, {.reserve_bytes = 8 << 20, .copy_threads = 4});
    EXPECT_EQ(std::filesystem::file_size(path), 8u << 20);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      written.push_back(random_tokens(rng, tokens[i]));
      const std::span<const std::int32_t> all(written.back());
      const std::size_t cut = all.size() / 3 / kTokenSize * kTokenSize;
      writer.append(std::int64_t(i), 9, all.first(cut), all.subspan(cut));
      // Readable while written: the zeros after the last chunk read as its end.
      const io::TraceFile live = io::read_trace_file(path);
      EXPECT_EQ(live.chunks.size(), i + 1);
    }
  }
  const io::TraceFile file = io::read_trace_file(path);
  EXPECT_FALSE(file.truncated);  // closing cut the unused reserve
  ASSERT_EQ(file.chunks.size(), written.size());
  for (std::size_t i = 0; i < written.size(); ++i) {
    EXPECT_EQ(file.chunks[i].ids, written[i]) << i;
    EXPECT_EQ(file.chunks[i].pass_id, std::int64_t(i));
  }
}

TEST(TraceFile, UnusedReserveIsCutWhenTheWriterCloses) {
  ScratchDir dir;
  const auto path = dir.path() / "small.bin";
  std::mt19937 rng(8);
  const auto ids = random_tokens(rng, 2);
  { io::TraceWriter(path, kHeader).append(0, 0, ids); }
  const auto plain_size = std::filesystem::file_size(path);
  { io::TraceWriter(path, kHeader, {.reserve_bytes = 1 << 20}).append(0, 0, ids); }
  EXPECT_EQ(std::filesystem::file_size(path), plain_size);
  EXPECT_EQ(io::read_trace_file(path).chunks.at(0).ids, ids);
}

TEST(TraceFile, ReserveThatCannotBeAllocatedIsAnErrorNamingTheFile) {
  ScratchDir dir;
  // 2^62 bytes: more than any file system here holds.
  expect_error(
      [&] {
        io::TraceWriter(dir.path() / "huge.bin", kHeader,
                        {.reserve_bytes = std::uint64_t(1) << 62});
      },
      {"cannot reserve", "huge.bin"});
}

TEST(TraceFile, RefusesWhatIsNotATrace) {
  ScratchDir dir;
  const auto path = dir.path() / "bad.bin";
  std::ofstream(path) << "{\"logical_count\": [[1]]}";
  expect_error([&] { io::read_trace_file(path); }, {"not a moestat trace", "bad.bin"});
  expect_error([&] { io::read_trace_file(dir.path() / "missing.bin"); }, {"missing.bin"});
}

TEST(TraceFile, RefusesIdsOutsideThePhysicalExperts) {
  ScratchDir dir;
  const auto path = dir.path() / "ids.bin";
  {
    io::TraceWriter writer(path, kHeader);
    std::vector<std::int32_t> ids(kTokenSize, 0);
    ids[3] = 8;  // P = 8
    writer.append(7, 0, ids);
  }
  expect_error([&] { io::read_trace_file(path); }, {"id 8", "pass 7"});
}

TEST(TraceFile, RefusesImplausibleHeadersAndPartialTokens) {
  ScratchDir dir;
  expect_error([&] { io::TraceWriter(dir.path() / "x.bin", io::TraceHeader{}); },
               {"positive sizes"});
  io::TraceWriter writer(dir.path() / "y.bin", kHeader);
  const std::vector<std::int32_t> partial(kTokenSize + 1, 0);
  expect_error([&] { writer.append(0, 0, partial); }, {"whole number of tokens"});
  expect_error([&] { io::TraceWriter(dir.path() / "no-such-dir" / "z.bin", kHeader); },
               {"cannot write", "no-such-dir", "No such file or directory"});
}

TEST(TraceFile, NeitherWritesThroughNorReplacesALink) {
  // The rules of every other output (io/output_file.hpp): truncated through a link, a trace
  // path would empty whatever the link points to.
  ScratchDir dir;
  std::ofstream(dir.path() / "kept.bin") << "keep";
  std::filesystem::create_symlink(dir.path() / "kept.bin", dir.path() / "trace.bin");
  expect_error([&] { io::TraceWriter(dir.path() / "trace.bin", kHeader); },
               {"trace.bin", "is a symbolic link", "kept.bin"});
  std::ifstream in(dir.path() / "kept.bin");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "keep");
  EXPECT_TRUE(std::filesystem::is_symlink(dir.path() / "trace.bin"));
}

/// A trace laid out by hand: magic, `version`, byte order, L=1 E=2 P=2 k=1, then `extra`
/// header bytes, then one chunk of pass 5 holding ids {1, 0}.
std::string hand_made_trace(std::uint32_t version, const std::string& extra) {
  std::string out = "MOETRACE";
  auto put = [&out](auto value) {
    out.append(reinterpret_cast<const char*>(&value), sizeof value);
  };
  put(version);
  put(std::uint32_t(0x01020304));
  for (std::int64_t field : {1, 2, 2, 1}) put(field);
  out += extra;
  out += "PASS";
  put(std::int64_t(5));
  put(std::uint64_t(9));
  put(std::int64_t(2));
  put(std::int32_t(1));
  put(std::int32_t(0));
  return out;
}

std::span<const std::byte> bytes_of(const std::string& text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

std::string u32(std::uint32_t value) {
  return std::string(reinterpret_cast<const char*>(&value), sizeof value);
}

TEST(TraceFile, HeaderStatesIdDtypeAndItsOwnSize) {
  ScratchDir dir;
  { io::TraceWriter writer(dir.path() / "t.bin", kHeader); }
  std::ifstream in(dir.path() / "t.bin", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), 56u);
  EXPECT_EQ(bytes.substr(8, 4), u32(2));    // version
  EXPECT_EQ(bytes.substr(48, 4), u32(0));   // ids are int32 (DType code 0)
  EXPECT_EQ(bytes.substr(52, 4), u32(56));  // chunks start at byte 56
}

TEST(TraceFile, ReadsVersionOneAndLongerVersionTwoHeaders) {
  const io::TraceFile v1 = io::read_trace(bytes_of(hand_made_trace(1, "")));
  ASSERT_EQ(v1.chunks.size(), 1u);
  EXPECT_EQ(v1.chunks[0].ids, (std::vector<std::int32_t>{1, 0}));
  EXPECT_EQ(v1.chunks[0].placement_version, 9u);
  // A later writer may append header fields: the header size says where chunks start.
  const io::TraceFile v2 =
      io::read_trace(bytes_of(hand_made_trace(2, u32(0) + u32(64) + std::string(8, 'x'))));
  ASSERT_EQ(v2.chunks.size(), 1u);
  EXPECT_EQ(v2.chunks[0].pass_id, 5);
  expect_error([] { io::read_trace(bytes_of(hand_made_trace(2, u32(1) + u32(56)))); },
               {"id dtype code 1"});
  expect_error([] { io::read_trace(bytes_of(hand_made_trace(2, u32(0) + u32(40)))); },
               {"header size 40"});
  expect_error([] { io::read_trace(bytes_of(hand_made_trace(3, ""))); }, {"<memory>", "version 3"});
}

RC_GTEST_PROP(TraceFileProperty, RandomTracesRoundTripAndEveryPrefixReadsItsCompleteChunks, ()) {
  const io::TraceHeader header{.num_layers = *rc::gen::inRange<std::int64_t>(1, 4),
                               .num_logical_experts = 3,
                               .num_physical_experts = *rc::gen::inRange<std::int64_t>(3, 9),
                               .top_k = *rc::gen::inRange<std::int64_t>(1, 3)};
  const std::int64_t token_size = header.num_layers * header.top_k;
  std::vector<io::TraceChunk> written(*rc::gen::inRange<std::size_t>(0, 5));
  for (std::size_t i = 0; i < written.size(); ++i) {
    written[i].pass_id = std::int64_t(i) * 3 - 1;
    written[i].placement_version = *rc::gen::inRange<std::uint64_t>(0, 3);
    written[i].ids = *rc::gen::container<std::vector<std::int32_t>>(
        std::size_t(token_size * *rc::gen::inRange<std::int64_t>(0, 4)),
        rc::gen::inRange<std::int32_t>(-1, std::int32_t(header.num_physical_experts)));
  }
  ScratchDir dir;
  const auto path = dir.path() / "t.bin";
  {
    io::TraceWriter writer(path, header);
    for (const auto& chunk : written)
      writer.append(chunk.pass_id, chunk.placement_version, chunk.ids);
  }
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto cut = *rc::gen::inRange<std::size_t>(56, bytes.size() + 1);
  const io::TraceFile file = io::read_trace(bytes_of(bytes.substr(0, cut)));
  // The complete chunks, in order, and nothing else.
  RC_ASSERT(file.chunks.size() <= written.size());
  RC_ASSERT(!file.truncated || cut < bytes.size());
  for (std::size_t i = 0; i < file.chunks.size(); ++i) {
    RC_ASSERT(file.chunks[i].pass_id == written[i].pass_id);
    RC_ASSERT(file.chunks[i].placement_version == written[i].placement_version);
    RC_ASSERT(file.chunks[i].ids == written[i].ids);
  }
  if (cut == bytes.size()) RC_ASSERT(file.chunks.size() == written.size());
}

}  // namespace
}  // namespace moestat::test
