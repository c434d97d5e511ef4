// The bounds every moestat reader holds on a hostile file (docs/formats.md, "Bounds on hostile
// files"), for readers outside io that build on its containers (the routes file).
#pragma once

#include <cstdint>
#include <string_view>

namespace moestat::io {

/// How many times its size a file may take in memory when read (besides 1 MiB).
inline constexpr std::uint64_t kReadExpansion = 16;

/// The memory a reader may take for a file of `file_bytes`, beyond its own bytes:
/// kReadExpansion times its size plus 1 MiB (saturating).
std::uint64_t read_memory_bound(std::uint64_t file_bytes) noexcept;

/// moestat::Error ("not valid JSON ...") unless `text` is JSON that moestat's JSON readers
/// take: no NUL byte, no key twice in one object, nesting at most 64 deep, a document of at
/// most read_memory_bound(text.size()) bytes. Checked by a scan that builds nothing, so a
/// caller may then parse `text` without these risks; a syntax error is left to that parse,
/// which says where it is.
void check_json(std::string_view text);

}  // namespace moestat::io
