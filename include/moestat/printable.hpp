// Bytes from files made safe to show on a terminal or in a log.
#pragma once

#include <string>
#include <string_view>

namespace moestat {

/// `bytes` with every byte that could act on a terminal, or is not UTF-8, written as `\xNN`
/// (two lower-case hex digits): bytes below 0x20, 0x7f, the C1 controls U+0080..U+009F
/// (which some terminals obey even in UTF-8) and every byte of an invalid UTF-8 sequence.
/// Printable ASCII and other valid UTF-8 pass unchanged. A backslash is not escaped, so
/// escaping twice gives what escaping once gives (moestat::Error escapes every message, and
/// a message may quote one already escaped).
std::string printable(std::string_view bytes);

}  // namespace moestat
