// Documents of many keys parse in O(n log n) (issue 14: a 160k-key JSON file took 22 s and a
// safetensors header of 160k entries 68 s, since ordered_json inserts by a linear scan).
// Registered with a ctest timeout about a hundred times the time these take now, which the
// quadratic parse exceeded many times over.
#include <gtest/gtest.h>

#include <cstring>
#include <moestat/io/counts_json.hpp>
#include <moestat/io/document.hpp>
#include <moestat/io/safetensors.hpp>

namespace moestat::test {
namespace {

TEST(ManyKeys, LogicalCountsWithTwoHundredThousandOtherKeys) {
  std::string text = R"({"logical_count": [[1, 2]])";
  for (int i = 0; i < 200000; ++i) text += fmt::format(", \"key{:07}\": 0", i);
  text += "}";
  const CountWindow counts = io::logical_counts_from_json(text);
  EXPECT_EQ(counts.counts, (std::vector<std::int64_t>{1, 2}));
}

TEST(ManyKeys, SafetensorsHeaderOfOneHundredThousandTensors) {
  constexpr int kTensors = 100000;
  std::string header = "{";
  for (int i = 0; i < kTensors; ++i) {
    header += fmt::format(
        "{}\"t{:07}\": {{\"dtype\": \"I32\", \"shape\": [1], "
        "\"data_offsets\": [{}, {}]}}",
        i == 0 ? "" : ", ", i, 4 * i, 4 * i + 4);
  }
  header += "}";
  const std::uint64_t size = header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &size, 8);
  bytes += header + std::string(4 * kTensors, '\0');
  const io::NamedTensors file =
      io::read_safetensors(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())));
  ASSERT_EQ(file.tensors.size(), std::size_t(kTensors));
  EXPECT_EQ(file.tensors.back().first, "t0099999");  // in the order of the data
}

}  // namespace
}  // namespace moestat::test
