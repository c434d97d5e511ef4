// libFuzzer target: the per-token trace reader. Any input must read or throw moestat::Error.
#include <moestat/error.hpp>
#include <moestat/io/trace_file.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)moestat::io::read_trace(std::as_bytes(std::span(data, size)), "fuzz");
  } catch (const moestat::Error&) {
  }
  return 0;
}
