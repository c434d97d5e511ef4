// Test helper: expect a moestat::Error whose message contains a given piece of text, so a
// test fails when a different check than the intended one fires.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <moestat/error.hpp>

/// Expects `statement` to throw moestat::Error with `substring` in its message.
#define EXPECT_MOESTAT_ERROR(statement, substring) \
  EXPECT_THAT([&] { statement; },                  \
              ::testing::ThrowsMessage<::moestat::Error>(::testing::HasSubstr(substring)))
