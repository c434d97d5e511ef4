// Per-token traces hold physical ids, none of the statistics payloads: every read says so.
#include <moestat/error.hpp>

#include "codec.hpp"

namespace moestat::io::detail {
namespace {

class TraceCodec final : public Codec {
 public:
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
