// llama.cpp's imatrix files (GGUF) hold per-expert routing counts and nothing else moestat
// reads: every read is of counts (io/gguf.hpp), and moestat writes no GGUF.
#include <moestat/error.hpp>
#include <moestat/io/gguf.hpp>

#include "codec.hpp"

namespace moestat::io::detail {
namespace {

class GgufCodec final : public Codec {
 public:
  bool has_signature(std::string_view bytes) const override { return bytes.starts_with("GGUF"); }
  bool starts_like(std::string_view) const override { return false; }
  StatisticsKind kind_of(std::string_view, std::string_view) const override {
    return StatisticsKind::kLogicalCounts;
  }
  StatisticsFile read(std::string_view bytes, std::string_view name, StatisticsKind kind,
                      const ReadOptions&) const override {
    MOESTAT_CHECK(kind == StatisticsKind::kLogicalCounts,
                  "a GGUF file holds llama-imatrix's per-expert counts at most, no {}",
                  statistics_kind_name(kind));
    return imatrix_counts(std::as_bytes(std::span(bytes.data(), bytes.size())), name);
  }
  std::string write(const StatisticsFile&) const override {
    MOESTAT_FAIL("moestat does not write GGUF files (llama.cpp's llama-imatrix writes them)");
  }
};

}  // namespace

const Codec& gguf_codec() {
  static const GgufCodec codec;
  return codec;
}

}  // namespace moestat::io::detail
