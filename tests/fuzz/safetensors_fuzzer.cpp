// libFuzzer target: the safetensors reader. Any input must read or throw moestat::Error.
#include <moestat/error.hpp>
#include <moestat/io/safetensors.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)moestat::io::read_safetensors(std::as_bytes(std::span(data, size)), "fuzz");
  } catch (const moestat::Error&) {
  }
  return 0;
}
