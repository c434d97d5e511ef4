// A stable descending order of up to a few thousand 32-bit keys without comparisons.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace moestat::plan::detail {

/// A sort key and the item it belongs to.
struct KeyedItem {
  std::uint32_t key;
  std::int32_t item;
};

/// Sorts `items` by key, largest first, equal keys kept in their input order: an LSD radix
/// sort on 8-bit digits that skips every digit all keys share. `spare` is scratch space.
/// Branch-free per item, so it beats a comparison sort on the few hundred keys of a layer,
/// whose compares mispredict about half the time.
inline void radix_sort_descending(std::vector<KeyedItem>& items, std::vector<KeyedItem>& spare) {
  constexpr int kDigits = 4;
  constexpr int kRadix = 256;
  const auto digit = [](std::uint32_t key, int d) { return (~key >> (8 * d)) & (kRadix - 1); };
  std::array<std::array<std::uint32_t, kRadix>, kDigits> counts{};
  for (const KeyedItem& entry : items) {
    for (int d = 0; d < kDigits; ++d) ++counts[d][digit(entry.key, d)];
  }
  spare.resize(items.size());
  for (int d = 0; d < kDigits; ++d) {
    if (items.empty() || counts[d][digit(items.front().key, d)] == items.size()) continue;
    std::array<std::uint32_t, kRadix> next{};
    std::uint32_t offset = 0;
    for (int b = 0; b < kRadix; ++b) {
      next[b] = offset;
      offset += counts[d][b];
    }
    for (const KeyedItem& entry : items) spare[next[digit(entry.key, d)]++] = entry;
    items.swap(spare);
  }
}

}  // namespace moestat::plan::detail
