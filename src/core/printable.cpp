#include <cstdint>
#include <moestat/printable.hpp>
#include <moestat/utf8.hpp>

namespace moestat {
namespace {

/// The length of the well-formed UTF-8 sequence at `text[at]` (2 to 4 bytes), or 0 when
/// there is none: RFC 3629's table, so overlong forms, surrogates (unless allowed) and code
/// points above U+10FFFF are not sequences.
std::size_t sequence_length(std::string_view text, std::size_t at, bool surrogates = false) {
  const auto byte = [&](std::size_t i) { return std::uint8_t(text[at + i]); };
  const std::uint8_t lead = byte(0);
  std::size_t length = 0;
  std::uint8_t low = 0x80;
  std::uint8_t high = 0xbf;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;                  // overlong below U+0800
    if (lead == 0xed && !surrogates) high = 0x9f;  // surrogates U+D800..U+DFFF
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;   // overlong below U+10000
    if (lead == 0xf4) high = 0x8f;  // above U+10FFFF
  } else {
    return 0;
  }
  if (at + length > text.size() || byte(1) < low || byte(1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xbf) return 0;
  }
  return length;
}

/// U+0080..U+009F: C1 controls, encoded as C2 80..C2 9F.
bool is_c1_control(std::string_view text, std::size_t at) {
  return std::uint8_t(text[at]) == 0xc2 && std::uint8_t(text[at + 1]) <= 0x9f;
}

void append_escaped(std::string& out, std::uint8_t byte) {
  constexpr char kHex[] = "0123456789abcdef";
  out += "\\x";
  out += kHex[byte >> 4];
  out += kHex[byte & 0xf];
}

}  // namespace

bool is_utf8(std::string_view bytes, bool allow_surrogates) {
  for (std::size_t at = 0; at < bytes.size();) {
    if (std::uint8_t(bytes[at]) < 0x80) {
      ++at;
      continue;
    }
    const std::size_t length = sequence_length(bytes, at, allow_surrogates);
    if (length == 0) return false;
    at += length;
  }
  return true;
}

std::string printable(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t at = 0; at < bytes.size();) {
    const auto byte = std::uint8_t(bytes[at]);
    if (byte >= 0x20 && byte < 0x7f) {
      out += char(byte);
      ++at;
      continue;
    }
    const std::size_t length = byte >= 0x80 ? sequence_length(bytes, at) : 0;
    if (length == 0 || is_c1_control(bytes, at)) {
      // Escape one byte and look again from the next: a bad lead byte may precede a good
      // sequence, and a C1 control's two bytes are escaped one at a time.
      append_escaped(out, byte);
      ++at;
      continue;
    }
    out.append(bytes.substr(at, length));
    at += length;
  }
  return out;
}

}  // namespace moestat
