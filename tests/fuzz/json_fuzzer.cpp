// libFuzzer target: the JSON readers (snapshot, counts with and without fractions, placement,
// detection). A rebalance simulation has a target of its own (simulation_fuzzer.cpp).
// Any input must read or throw moestat::Error.
#include <moestat/error.hpp>
#include <moestat/io/counts_json.hpp>
#include <moestat/io/document.hpp>
#include <moestat/io/placement_json.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    (void)moestat::io::document_from_json(text);
  } catch (const moestat::Error&) {
  }
  try {
    (void)moestat::io::placement_from_json(text, 0, 0);
  } catch (const moestat::Error&) {
  }
  try {
    (void)moestat::io::logical_counts_from_json(text);
  } catch (const moestat::Error&) {
  }
  try {
    (void)moestat::io::logical_counts_from_json(text, moestat::io::Fractions::kKeep);
  } catch (const moestat::Error&) {
  }
  return 0;
}
