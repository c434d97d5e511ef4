// libFuzzer target: the .pt reader (zip container + pickle subset) and the SGLang readers
// on top of it. Any input must read or throw moestat::Error; nothing else.
#include <moestat/error.hpp>
#include <moestat/io/sglang.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const moestat::io::PtValue value =
        moestat::io::read_pt(std::as_bytes(std::span(data, size)), "fuzz");
    try {
      (void)moestat::io::logical_counts_from_pt(value);
    } catch (const moestat::Error&) {
    }
    try {
      (void)moestat::io::placement_from_pt(value);
    } catch (const moestat::Error&) {
    }
  } catch (const moestat::Error&) {
  }
  return 0;
}
