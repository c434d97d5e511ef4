// One codec per container format (JSON, .pt, safetensors, trace): it recognises the format's
// bytes, turns a file into named tensors and back, and the payload mappings
// (payload_mappings.hpp) turn those into each statistics payload. The format registry
// (format_registry.cpp, io/formats.hpp) names each format with its codec; statistics_file.cpp
// picks the codec once, from the format, and knows nothing else about formats.
//
// A new format is one TensorContainerCodec (its detectors, decode and encode: where its layout
// differs from plain named tensors, as SGLang's dicts and moestat's JSON documents do, that is
// said there and nowhere else) plus its entry in the registry; a new payload is one mapping,
// which every codec then reads and writes with no change.
#pragma once

#include <cstdint>
#include <moestat/io/named_tensors.hpp>
#include <moestat/io/pt.hpp>
#include <moestat/io/statistics.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "payload_mappings.hpp"

namespace moestat::io::detail {

class Codec {
 public:
  virtual ~Codec() = default;

  /// Bytes only this format starts with, whatever the file is called (a zip is .pt).
  virtual bool has_signature(std::string_view bytes) const = 0;
  /// Bytes shaped like this format, for a file whose name does not say (a bare pickle is a
  /// legacy .pt); asked only when no format has the file's signature.
  virtual bool starts_like(std::string_view bytes) const = 0;

  /// The payload `bytes` hold, for a file read without saying which: the first mapping of
  /// payload_mappings() one of whose tensor names appears in them (quoted, as JSON and a
  /// safetensors header spell keys), else counts. `name` (the path) is for codecs whose
  /// reader names its input.
  virtual StatisticsKind kind_of(std::string_view bytes, std::string_view name) const;
  /// The payload `kind` out of `bytes`; moestat::Error saying what is missing or malformed.
  virtual StatisticsFile read(std::string_view bytes, std::string_view name, StatisticsKind kind,
                              const ReadOptions& options) const = 0;
  /// The bytes of a file holding `file`.
  virtual std::string write(const StatisticsFile& file) const = 0;

 protected:
  Codec() = default;
  Codec(const Codec&) = default;
  Codec& operator=(const Codec&) = default;
};

/// A container of named tensors: the payload mappings turn payloads into its contents.
class TensorContainerCodec : public Codec {
 public:
  StatisticsFile read(std::string_view bytes, std::string_view name, StatisticsKind kind,
                      const ReadOptions& options) const final;
  std::string write(const StatisticsFile& file) const final;

  // The container's layout, which read and write put around the payload mappings.

  /// "safetensors": what error messages call the container.
  virtual std::string_view container_name() const noexcept = 0;
  /// The named tensors in `bytes`: at least those of `wanted`'s forms that the file holds
  /// (a container may leave out the rest, as JSON leaves keys it does not need unread).
  /// `options` are the read's: a container whose reader meets a tensor element by element
  /// (JSON) refuses one of a shape they rule out as soon as it breaks it.
  virtual NamedTensors decode(std::string_view bytes, std::string_view name,
                              const PayloadMapping& wanted, const ReadOptions& options) const = 0;
  virtual std::string encode(const NamedTensors& tensors) const = 0;
};

/// `mapping`'s payload from `tensors`; moestat::Error naming `container` and the tensors it
/// holds when none of the mapping's forms is among them.
StatisticsFile payload_from_tensors(const PayloadMapping& mapping, const NamedTensors& tensors,
                                    const ReadOptions& options, std::string_view container);

/// The codec of each format (format_registry.cpp).
const Codec& codec_for(FileFormat format);

// The codecs, one file each.
const Codec& json_codec();
const Codec& pt_codec();
const Codec& safetensors_codec();
const Codec& trace_codec();
const Codec& gguf_codec();

// ---- SGLang's .pt layout (pt_codec.cpp), for the .pt functions of io/sglang.hpp ----

/// The named tensors of a .pt value: a bare tensor is KTransformers' expert mask; SGLang's
/// per-pass and per-token dumps hold their records' counts mapped to logical experts, with
/// the pass ids (window_tensors); any other dict holds its tensor entries.
NamedTensors tensors_of_pt(const PtValue& value);
/// The .pt value of named tensors: counts as SGLang's stat dump, a mask alone as a bare
/// tensor, anything else as a dict of the tensors.
PtValue pt_of_tensors(const NamedTensors& tensors);
/// SGLang's stat dump around its "logical_count" tensor.
PtDict stat_dump(HostTensor logical_count, std::int64_t rank,
                 std::optional<double> average_utilization);
/// The counts of SGLang's per-pass and per-token dumps (sglang_values.cpp).
CountWindow counts_of_records(const PtValue& dump);

}  // namespace moestat::io::detail
