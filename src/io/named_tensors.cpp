// Lookup in a list of named tensors.
#include <moestat/io/named_tensors.hpp>

namespace moestat::io {

const HostTensor* NamedTensors::find(std::string_view name) const noexcept {
  for (const auto& [key, tensor] : tensors) {
    if (key == name) return &tensor;
  }
  return nullptr;
}

}  // namespace moestat::io
