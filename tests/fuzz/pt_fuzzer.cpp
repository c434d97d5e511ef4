// libFuzzer target: the .pt reader and the SGLang readers on top of it. Inputs starting
// with a zip signature go through the whole reader; any other input is fed to the
// unpickler directly (storages read as zeros), since mutations inside a zip mostly break
// its CRC and would leave the pickle subset little explored. Any input must read or throw
// moestat::Error; nothing else.
#include <moestat/error.hpp>
#include <moestat/io/sglang.hpp>
#include <vector>

#include "io/pickle.hpp"
#include "io/read_budget.hpp"

namespace {

void read_as_sglang(const moestat::io::PtValue& value) {
  try {
    (void)moestat::io::logical_counts_from_pt(value);
  } catch (const moestat::Error&) {
  }
  try {
    (void)moestat::io::placement_from_pt(value);
  } catch (const moestat::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  try {
    if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
      read_as_sglang(moestat::io::read_pt(bytes, "fuzz"));
      return 0;
    }
    std::vector<std::byte> zeros;
    const moestat::io::detail::StorageLoader load =
        [&](const moestat::io::detail::StorageRef& ref) {
          const std::uint64_t wanted = std::uint64_t(ref.numel) * moestat::dtype_size(ref.dtype);
          MOESTAT_CHECK(wanted <= (1u << 20), "storage too large for the fuzzer");
          zeros.assign(wanted, std::byte{0});
          return std::span<const std::byte>(zeros);
        };
    moestat::io::detail::ReadBudget budget(size, 16);
    read_as_sglang(moestat::io::detail::unpickle(bytes, load, budget, 64));
  } catch (const moestat::Error&) {
  }
  return 0;
}
