// Named tensors with string metadata: what a tensor container (a safetensors file) holds,
// and the form every statistics payload takes in one (src/io/payload_mappings.hpp).
#pragma once

#include <map>
#include <moestat/io/host_tensor.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moestat::io {

struct NamedTensors {
  /// String to string, such as {"format": "moestat.logical_count"}.
  std::map<std::string, std::string> metadata;
  /// Tensors by name, in the order of their data in the file. Devices are not stored.
  std::vector<std::pair<std::string, HostTensor>> tensors;

  /// The tensor named `name`, or nullptr.
  const HostTensor* find(std::string_view name) const noexcept;

  friend bool operator==(const NamedTensors&, const NamedTensors&) = default;
};

}  // namespace moestat::io
