// libFuzzer target: the routes file reader (safetensors container, then the routes checks).
// Any input must read or throw moestat::Error; and what it reads, the writer writes and the
// reader reads back unchanged whenever the writer takes it (writer and reader share their
// checks: a file the writer makes never fails to read).
#include <cstdlib>
#include <moestat/error.hpp>
#include <moestat/routes/routes_file.hpp>

namespace {

void check_rewrite(const std::vector<moestat::routes::RoutedExperts>& routes) {
  moestat::io::NamedTensors tensors;
  try {
    // The writer may refuse what a file padded with unused metadata brought within the
    // read bound; it then says so with a moestat::Error.
    tensors = moestat::routes::routes_to_tensors(routes);
  } catch (const moestat::Error&) {
    return;
  }
  if (moestat::routes::routes_from_tensors(tensors) != routes) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<moestat::routes::RoutedExperts> routes;
  try {
    routes = moestat::routes::read_routes(std::as_bytes(std::span(data, size)), "fuzz");
  } catch (const moestat::Error&) {
    return 0;
  }
  check_rewrite(routes);
  return 0;
}
