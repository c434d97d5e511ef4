// Per-token traces hold physical ids, none of the statistics payloads: every read says so. A
// trace is recognised by its magic, or by its header's byte-order mark when the magic is
// damaged.
#include <moestat/error.hpp>

#include "codec.hpp"

namespace moestat::io::detail {
namespace {

class TraceCodec final : public Codec {
 public:
  bool has_signature(std::string_view bytes) const override {
    return bytes.starts_with("MOETRACE");
  }
  /// The byte-order mark (0x01020304 little-endian at offset 12), which a trace whose magic
  /// was damaged still carries.
  bool starts_like(std::string_view bytes) const override {
    return bytes.size() >= 16 && bytes.compare(12, 4, "\x04\x03\x02\x01") == 0;
  }
  StatisticsKind kind_of(std::string_view, std::string_view) const override {
    MOESTAT_FAIL("a per-token trace is not a statistics file");
  }
  StatisticsFile read(std::string_view, std::string_view, StatisticsKind kind,
                      const ReadOptions&) const override {
    switch (kind) {
      case StatisticsKind::kLogicalCounts:
        MOESTAT_FAIL("a per-token trace holds no logical counts (it has physical ids)");
      case StatisticsKind::kPlacement:
        MOESTAT_FAIL("a per-token trace holds no placement");
      case StatisticsKind::kExpertMask:
        MOESTAT_FAIL("a per-token trace holds no expert mask");
    }
    MOESTAT_FAIL("a per-token trace holds no {}", statistics_kind_name(kind));
  }
  std::string write(const StatisticsFile&) const override {
    MOESTAT_FAIL("a trace cannot be written here");
  }
};

}  // namespace

const Codec& trace_codec() {
  static const TraceCodec codec;
  return codec;
}

}  // namespace moestat::io::detail
