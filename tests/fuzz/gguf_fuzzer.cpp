// libFuzzer target: the GGUF reader, as a header and as llama-imatrix's counts. Any input must
// read or throw moestat::Error.
#include <moestat/error.hpp>
#include <moestat/io/gguf.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  try {
    (void)moestat::io::read_gguf_header(bytes, "fuzz");
  } catch (const moestat::Error&) {
  }
  try {
    (void)moestat::io::imatrix_counts(bytes, "fuzz");
  } catch (const moestat::Error&) {
  }
  return 0;
}
