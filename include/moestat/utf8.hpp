// Whether bytes from a file are text: readers refuse what the reference readers refuse.
#pragma once

#include <string_view>

namespace moestat {

/// Whether `bytes` is well-formed UTF-8 (RFC 3629: no overlong forms, nothing above
/// U+10FFFF). `allow_surrogates` also accepts encoded U+D800..U+DFFF, as Python's pickle
/// decodes strings ("surrogatepass").
bool is_utf8(std::string_view bytes, bool allow_surrogates = false);

}  // namespace moestat
