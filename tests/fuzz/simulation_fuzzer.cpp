// libFuzzer target: a rebalance simulation (what `moestat simulate --json` writes) read and
// drawn as its page. A reader of its own, so a target of its own, with its own seeds and
// corpus (the JSON readers' inputs are of another shape).
// Any input must read and draw or throw moestat::Error.
#include <moestat/error.hpp>
#include <moestat/report/simulation.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    (void)moestat::report::render_simulation_html(moestat::report::parse_simulation(text, "x"));
  } catch (const moestat::Error&) {
  }
  return 0;
}
