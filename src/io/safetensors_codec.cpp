// Statistics in safetensors files: named tensors as they are.
#include <algorithm>
#include <moestat/io/safetensors.hpp>

#include "codec.hpp"

namespace moestat::io::detail {
namespace {

class SafetensorsCodec final : public TensorContainerCodec {
  /// The u64 header size then '{'. The size must be binary, a byte no JSON text holds (a size
  /// below 2^56 ends in a zero byte), so JSON with '{' at byte 8 is not taken for it; whether
  /// the size fits the file is for the reader to say.
  bool has_signature(std::string_view bytes) const override {
    if (bytes.size() < 9 || bytes[8] != '{') return false;
    return std::any_of(bytes.begin(), bytes.begin() + 8, [](char c) {
      const auto byte = static_cast<unsigned char>(c);
      return byte < 0x20 && byte != '\t' && byte != '\n' && byte != '\r';
    });
  }
  bool starts_like(std::string_view) const override { return false; }
  std::string_view container_name() const noexcept override { return "safetensors"; }
  NamedTensors decode(std::string_view bytes, std::string_view, const PayloadMapping&,
                      const ReadOptions&) const override {
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
