// safetensors files (Hugging Face's format; TensorRT-LLM-style per-rank statistics and
// general use): read and write. Layout in docs/formats.md.
//
//   io::NamedTensors file;
//   file.metadata["format"] = "moestat.logical_count";
//   file.tensors.emplace_back("logical_count", io::HostTensor::of<std::int32_t>({L, E}, counts));
//   io::write_safetensors_file("rank0.safetensors", file);
#pragma once

#include <cstddef>
#include <filesystem>
#include <moestat/io/named_tensors.hpp>
#include <span>
#include <string>
#include <string_view>

namespace moestat::io {

/// Parses safetensors bytes (the optional "__metadata__" object is the metadata). moestat::Error
/// starting with `name` on a header that is not JSON, over 100 MB, names a dtype other than BOOL,
/// I32, I64, F32, F64, has offsets that do not match the shape, overlap, leave holes or run past
/// the end of the file.
NamedTensors read_safetensors(std::span<const std::byte> bytes, std::string_view name = "<memory>");
NamedTensors read_safetensors_file(const std::filesystem::path& path);

/// The bytes of a safetensors file: header padded with spaces to a multiple of 8 bytes,
/// then every tensor's data in order. moestat::Error on duplicate or empty names, a name
/// "__metadata__", or a tensor whose data size does not match its shape.
std::string safetensors_to_bytes(const NamedTensors& file);
/// Writes safetensors_to_bytes(file) atomically (temporary file, fsync, rename).
void write_safetensors_file(const std::filesystem::path& path, const NamedTensors& file);

}  // namespace moestat::io
