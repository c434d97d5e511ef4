// moestat::printable, and moestat::Error, which escapes every message with it (issue 14,
// item 10: file bytes in messages and listings must not drive a terminal).
#include <gtest/gtest.h>

#include <moestat/error.hpp>
#include <moestat/printable.hpp>
#include <moestat/utf8.hpp>
#include <string>

namespace moestat {
namespace {

using namespace std::string_literals;  // inputs hold NUL bytes

/// Naive reference: whether `text` is printable ASCII only, so no byte can act on a terminal.
bool is_plain_ascii(const std::string& text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      return false;
    }
  }
  return true;
}

TEST(Printable, LeavesPrintableAsciiAndUtf8Alone) {
  EXPECT_EQ(printable("logical_count [0] \\x41 ~"), "logical_count [0] \\x41 ~");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(printable(""), "");
}

TEST(Printable, EscapesControlBytesAndDelete) {
  EXPECT_EQ(printable("\x1b[2J\x1b]0;pwned\x07"), "\\x1b[2J\\x1b]0;pwned\\x07");
  EXPECT_EQ(printable("a\nb\tc\rd\x7f"s + '\0'), "a\\x0ab\\x09c\\x0dd\\x7f\\x00");
  // C1 controls (CSI is U+009B) act on some terminals even when encoded as UTF-8.
  EXPECT_EQ(printable("\xc2\x9b"
                      "31m \xc2\xa0"),
            "\\xc2\\x9b31m \xc2\xa0");
}

TEST(Printable, EscapesEveryByteOfInvalidUtf8) {
  EXPECT_EQ(printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(printable("\xc3"), "\\xc3");                             // cut short
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  // A bad lead byte does not swallow the valid sequence after it.
  EXPECT_EQ(printable("\x80\xc3\xa9"), "\\x80\xc3\xa9");
}

TEST(Printable, EveryByteValueComesOutPrintableAndEscapingTwiceIsEscapingOnce) {
  for (int byte = 0; byte < 256; ++byte) {
    const std::string once = printable(std::string(1, char(byte)) + "x");
    if (byte >= 0x80) {
      EXPECT_TRUE(is_plain_ascii(once)) << byte;  // alone, never UTF-8
    }
    EXPECT_EQ(printable(once), once) << byte;
  }
}

TEST(Printable, ErrorMessagesAreEscaped) {
  try {
    MOESTAT_FAIL("key \"{}\" in {}", "\x1b]0;pwned\x07", "f\xff.pt");
    FAIL() << "MOESTAT_FAIL did not throw";
  } catch (const Error& error) {
    EXPECT_EQ(error.message(), "key \"\\x1b]0;pwned\\x07\" in f\\xff.pt");
    EXPECT_TRUE(is_plain_ascii(error.what())) << error.what();
  }
}

TEST(Utf8, WellFormedTextOnly) {
  EXPECT_TRUE(is_utf8(""));
  EXPECT_TRUE(is_utf8("plain \n\t text"));
  EXPECT_TRUE(is_utf8("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));  // é € 😀
  for (const char* bad : {"\xff", "\xc0\xaf", "\xe0\x80\xaf", "\xc3", "\xf4\x90\x80\x80",
                          "a\x80"
                          "b"}) {
    EXPECT_FALSE(is_utf8(bad)) << printable(bad);
  }
  // An encoded surrogate: not UTF-8, but what Python's pickle decodes ("surrogatepass").
  EXPECT_FALSE(is_utf8("\xed\xa0\x80"));
  EXPECT_TRUE(is_utf8("\xed\xa0\x80", /*allow_surrogates=*/true));
  EXPECT_FALSE(is_utf8("\xff", /*allow_surrogates=*/true));
}

}  // namespace
}  // namespace moestat
