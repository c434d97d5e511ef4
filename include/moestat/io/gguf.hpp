// GGUF, llama.cpp's file format, read as far as moestat needs it: the per-expert routing
// counts that llama.cpp's `llama-imatrix` stores in every imatrix file it writes, and the
// tensor sizes of a model, which say what an expert costs in GPU memory (docs/llama-cpp.md).
//
//   const CountWindow counts = io::read_counts("imatrix.gguf");  // through the registry
//   const io::GgufHeader model = io::read_gguf_header_file("model.gguf");  // header only
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <moestat/counts.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moestat::io {

/// One metadata value: strings and numbers as text ("qwen3moe", "48", "0.5"), an array as
/// "[N x TYPE]" (its elements are skipped, not kept); `integer` for an integer scalar.
struct GgufValue {
  std::uint32_t type = 0;  ///< GGUF's value type (8 string, 9 array, 4 uint32, ...).
  std::string text{};
  std::optional<std::int64_t> integer{};
};

/// One tensor of the file: its name, its sizes in ggml's order (ne[0], the innermost,
/// first), its ggml type and where its data starts, from the start of the data section.
struct GgufTensorInfo {
  std::string name;
  std::vector<std::int64_t> shape;
  std::uint32_t type = 0;
  std::uint64_t offset = 0;
};

struct GgufHeader {
  std::uint32_t version = 0;  ///< 2 or 3.
  std::vector<std::pair<std::string, GgufValue>> metadata;
  std::vector<GgufTensorInfo> tensors;
  std::uint64_t data_offset = 0;  ///< Where tensor data starts in the file (aligned).

  /// The value of `key`, nullptr when the file has none.
  const GgufValue* find(std::string_view key) const noexcept;
};

/// The header of GGUF `bytes` (version 2 or 3, little-endian): metadata and tensor infos,
/// checked whole (sizes, at most 4 dimensions, offsets aligned, names and strings within the
/// bytes) and held within 16 times the bytes plus 1 MiB. Tensor data is not read; `bytes`
/// may end after the header. moestat::Error starting with `name` otherwise.
GgufHeader read_gguf_header(std::span<const std::byte> bytes, std::string_view name);
/// The header of a GGUF file of any size (a model of hundreds of GB), of which only the first
/// 64 MiB are read: moestat::Error naming `path` when its header goes beyond them.
GgufHeader read_gguf_header_file(const std::filesystem::path& path);

/// The bytes of `tensor`'s data from its ggml type (F32, F16, BF16, the integer types, the
/// Q, K, IQ and TQ quantisations, MXFP4, NVFP4), nullopt for a type this table does not know.
std::optional<std::uint64_t> ggml_tensor_bytes(const GgufTensorInfo& tensor);

/// The routing counts of an imatrix file written by `llama-imatrix`: for each decoder layer N
/// with expert tensors, the counts of `blk.N.ffn_*_exps.weight.counts` (F32 [1, E]: tokens
/// routed to each expert, the same for gate, up and down, which must agree). Layers without
/// expert tensors are dense: rows of zeros. L is the file's `<arch>.block_count` when it has
/// one, else the highest block + 1 (imatrix files name no model). Counts must be whole, finite
/// and >= 0. moestat::Error starting with `name` otherwise, or when the file has no expert
/// counts (a dense model's imatrix, or a model file).
CountWindow imatrix_counts(std::span<const std::byte> bytes, std::string_view name);

}  // namespace moestat::io
