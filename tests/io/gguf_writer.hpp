// Test helper: GGUF bytes laid out by hand from the format's description (llama.cpp's
// docs/gguf.md), independently of moestat's reader, and imatrix files as llama-imatrix writes
// them. Used by the unit tests and the fuzz seeds.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace moestat::test::gguf {

/// A metadata value: its GGUF type and its encoded bytes.
struct Value {
  std::uint32_t type;
  std::string bytes;
};

template <class T>
std::string raw(T value) {
  std::string out(sizeof(T), '\0');
  std::memcpy(out.data(), &value, sizeof(T));
  return out;
}
inline std::string str_bytes(const std::string& text) {
  return raw(std::uint64_t(text.size())) + text;
}
inline Value u32(std::uint32_t value) { return {4, raw(value)}; }
inline Value str(const std::string& text) { return {8, str_bytes(text)}; }
inline Value strings(const std::vector<std::string>& items) {
  std::string out = raw(std::uint32_t(8)) + raw(std::uint64_t(items.size()));
  for (const std::string& item : items) out += str_bytes(item);
  return {9, out};
}

struct Tensor {
  std::string name;
  std::vector<std::uint64_t> shape;  ///< ggml order: ne[0] first.
  std::uint32_t type = 0;            ///< 0 = F32.
  std::string data;
};

inline std::string f32_data(const std::vector<float>& values) {
  std::string out(values.size() * 4, '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

/// The file: header, metadata, tensor infos, padding to `alignment`, then each tensor's data,
/// each padded to `alignment`.
inline std::string file(const std::vector<std::pair<std::string, Value>>& metadata,
                        const std::vector<Tensor>& tensors, std::uint32_t version = 3,
                        std::uint64_t alignment = 32) {
  std::string out = "GGUF" + raw(version) + raw(std::uint64_t(tensors.size())) +
                    raw(std::uint64_t(metadata.size()));
  for (const auto& [key, value] : metadata) out += str_bytes(key) + raw(value.type) + value.bytes;
  std::string data;
  for (const Tensor& tensor : tensors) {
    out += str_bytes(tensor.name) + raw(std::uint32_t(tensor.shape.size()));
    for (const std::uint64_t size : tensor.shape) out += raw(size);
    out += raw(tensor.type) + raw(std::uint64_t(data.size()));
    data += tensor.data;
    data.resize((data.size() + alignment - 1) / alignment * alignment, '\0');
  }
  out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');
  return out + data;
}

/// An imatrix as llama-imatrix writes it: per layer of `experts` (layer, counts), the
/// .in_sum2 [4, E] and .counts [1, E] of its gate, up and down expert tensors; a dense
/// attention tensor (.counts [1, 1]) for every layer up to the last one counted.
inline std::string imatrix(const std::vector<std::pair<int, std::vector<float>>>& experts,
                           std::vector<std::pair<std::string, Value>> metadata = {}) {
  metadata.insert(metadata.begin(), {{"general.type", str("imatrix")},
                                     {"imatrix.datasets", strings({"calibration.txt"})},
                                     {"imatrix.chunk_count", u32(1)},
                                     {"imatrix.chunk_size", u32(512)}});
  std::vector<Tensor> tensors;
  int last = 0;
  for (const auto& [layer, counts] : experts) last = std::max(last, layer);
  for (int layer = 0; layer <= last; ++layer) {
    const std::string dense = "blk." + std::to_string(layer) + ".attn_q.weight";
    tensors.push_back({dense + ".in_sum2", {4, 1}, 0, f32_data({1, 2, 3, 4})});
    tensors.push_back({dense + ".counts", {1, 1}, 0, f32_data({512})});
  }
  for (const auto& [layer, counts] : experts) {
    for (const char* part : {"gate", "up", "down"}) {
      const std::string name = "blk." + std::to_string(layer) + ".ffn_" + part + "_exps.weight";
      tensors.push_back({name + ".in_sum2",
                         {4, counts.size()},
                         0,
                         f32_data(std::vector<float>(4 * counts.size(), 0.5f))});
      tensors.push_back({name + ".counts", {1, counts.size()}, 0, f32_data(counts)});
    }
  }
  return file(metadata, tensors);
}

}  // namespace moestat::test::gguf
