// Recording-mode names and RecorderOptions validation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <moestat/record_mode.hpp>
#include <string>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

// ---- Naive reference: the documented name of each mode ----
constexpr std::pair<RecordMode, const char*> kReferenceNames[] = {
    {RecordMode::kStat, "stat"},        {RecordMode::kStatApprox, "stat_approx"},
    {RecordMode::kPerPass, "per_pass"}, {RecordMode::kPerToken, "per_token"},
    {RecordMode::kDecayed, "decayed"},
};

TEST(RecordMode, NamesRoundTrip) {
  for (const auto& [mode, name] : kReferenceNames) {
    EXPECT_EQ(record_mode_name(mode), name);
    EXPECT_EQ(parse_record_mode(name), mode);
  }
}

TEST(RecordMode, UnknownValueHasAName) {
  EXPECT_EQ(record_mode_name(static_cast<RecordMode>(200)), "unknown");
}

TEST(RecordMode, ParseRejectsUnknownNames) {
  for (const std::string name : {"", "STAT", "stat ", " stat", "per-token", "approx", "unknown"}) {
    EXPECT_MOESTAT_ERROR(parse_record_mode(name), "unknown recording mode '" + name + "'");
  }
}

TEST(RecorderOptions, DefaultsAreValid) {
  const RecorderOptions options;
  EXPECT_EQ(options.mode, RecordMode::kStat);
  EXPECT_EQ(options.window_size, 1000);
  EXPECT_DOUBLE_EQ(options.decay, 0.95);
  EXPECT_EQ(options.per_token_capacity, 16384);
  EXPECT_NO_THROW(options.validate());
}

TEST(RecorderOptions, WindowSizeMustBePositiveOrMinusOne) {
  RecorderOptions options;
  for (std::int64_t ok : {std::int64_t(-1), std::int64_t(1), std::int64_t(1) << 20}) {
    options.window_size = ok;
    EXPECT_NO_THROW(options.validate());
  }
  for (std::int64_t bad : {std::int64_t(0), std::int64_t(-2), std::int64_t(-1000)}) {
    options.window_size = bad;
    EXPECT_MOESTAT_ERROR(
        options.validate(),
        "window_size must be positive or -1 (unbounded), got " + std::to_string(bad));
  }
}

TEST(RecorderOptions, DecayMustBeInUnitInterval) {
  RecorderOptions options;
  for (double ok : {0.0, 0.5, 1.0}) {
    options.decay = ok;
    EXPECT_NO_THROW(options.validate());
  }
  for (double bad : {-0.01, 1.01, std::nan(""), std::numeric_limits<double>::infinity()}) {
    options.decay = bad;
    EXPECT_MOESTAT_ERROR(options.validate(), "decay must be in [0, 1]");
  }
}

TEST(RecorderOptions, PerTokenCapacityMustBePositive) {
  RecorderOptions options;
  options.per_token_capacity = 1;
  EXPECT_NO_THROW(options.validate());
  for (std::int64_t bad : {std::int64_t(0), std::int64_t(-1)}) {
    options.per_token_capacity = bad;
    EXPECT_MOESTAT_ERROR(options.validate(),
                         "per_token_capacity must be positive, got " + std::to_string(bad));
  }
}

}  // namespace
}  // namespace moestat
