// Statistics in safetensors files: named tensors as they are.
#include <moestat/io/safetensors.hpp>

#include "codec.hpp"

namespace moestat::io::detail {
namespace {

class SafetensorsCodec final : public TensorContainerCodec {
  std::string_view container_name() const noexcept override { return "safetensors"; }
  NamedTensors decode(std::string_view bytes, std::string_view,
                      const PayloadMapping&) const override {
    return read_safetensors(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())));
  }
  std::string encode(const NamedTensors& tensors) const override {
    return safetensors_to_bytes(tensors);
  }
};

}  // namespace

const Codec& safetensors_codec() {
  static const SafetensorsCodec codec;
  return codec;
}

}  // namespace moestat::io::detail
