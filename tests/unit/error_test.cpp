// moestat::Error and the MOESTAT_CHECK / MOESTAT_FAIL macros.
#include <gtest/gtest.h>

#include <moestat/error.hpp>
#include <string>

namespace moestat {
namespace {

TEST(Error, CheckPassesWithoutThrowing) { EXPECT_NO_THROW(MOESTAT_CHECK(1 + 1 == 2, "never")); }

TEST(Error, CheckFormatsMessageAndLocation) {
  const int line = __LINE__ + 2;
  try {
    MOESTAT_CHECK(false, "value {} of {}", 7, "x");
    FAIL() << "MOESTAT_CHECK(false) did not throw";
  } catch (const Error& error) {
    EXPECT_EQ(error.message(), "value 7 of x");
    // The file name is relative to the repository (-fmacro-prefix-map), then the line.
    EXPECT_EQ(std::string(error.what()),
              "tests/unit/error_test.cpp:" + std::to_string(line) + ": value 7 of x");
  }
}

TEST(Error, FailAlwaysThrows) {
  EXPECT_THROW(MOESTAT_FAIL("broken {}", 1), Error);
  try {
    MOESTAT_FAIL("broken {}", 1);
  } catch (const Error& error) {
    EXPECT_EQ(error.message(), "broken 1");
  }
}

TEST(Error, WithContextKeepsTheOriginAndPrefixesTheMessage) {
  const int line = __LINE__ + 2;
  try {
    MOESTAT_FAIL("count {} is negative", -3);
  } catch (const Error& error) {
    const Error named = error.with_context("counts.json");
    EXPECT_EQ(named.message(), "counts.json: count -3 is negative");
    // "file:line: " of the check that fired, however the build spells the file's path.
    const std::string original = error.what();
    const std::string location = original.substr(0, original.size() - error.message().size());
    EXPECT_TRUE(location.ends_with("error_test.cpp:" + std::to_string(line) + ": ")) << location;
    EXPECT_EQ(std::string(named.what()), location + "counts.json: count -3 is negative");
    EXPECT_EQ(error.message(), "count -3 is negative");  // the original is left as it was
  }
}

TEST(Error, WithContextEscapesThePrefix) {
  try {
    MOESTAT_FAIL("bad \x1b byte {}", "\x07");
  } catch (const Error& error) {
    const Error named = error.with_context("dir/\x1b[31mred.json");
    const std::string escaped_path = printable("dir/\x1b[31mred.json");
    EXPECT_EQ(named.message(), escaped_path + ": " + error.message());
    EXPECT_EQ(named.message().find('\x1b'), std::string::npos);
    EXPECT_EQ(named.message().find('\x07'), std::string::npos);
  }
}

TEST(Error, IsARuntimeError) { EXPECT_THROW(MOESTAT_FAIL("x"), std::runtime_error); }

}  // namespace
}  // namespace moestat
