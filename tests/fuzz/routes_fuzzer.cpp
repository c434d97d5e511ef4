// libFuzzer target: the routes file reader (safetensors container, then the routes checks).
// Any input must read or throw moestat::Error.
#include <moestat/error.hpp>
#include <moestat/routes/routes_file.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)moestat::routes::read_routes(std::as_bytes(std::span(data, size)), "fuzz");
  } catch (const moestat::Error&) {
  }
  return 0;
}
