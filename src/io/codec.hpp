// One codec per container format (JSON, .pt, safetensors, trace): it reads and writes every
// statistics payload in its container. statistics_file.cpp picks the codec once, from the
// format, and knows nothing else about formats.
//
// A new format of named tensors is one TensorContainerCodec (its decode and encode) plus a
// line in codec_for; a new payload is one mapping (payload_mappings.hpp), which such
// containers then hold with no change, and its forms in the JSON and .pt codecs, whose
// documents are their own (SGLang's dicts, moestat's JSON).
#pragma once

#include <moestat/io/named_tensors.hpp>
#include <moestat/io/statistics.hpp>
#include <string>
#include <string_view>

#include "payload_mappings.hpp"

namespace moestat::io::detail {

class Codec {
 public:
  virtual ~Codec() = default;

  /// The payload `bytes` hold, for a file read without saying which: a placement when the
  /// map's key appears in them, else a mask when the mask's key does, else counts. `name`
  /// (the path) is for codecs whose reader names its input.
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

 protected:
  /// "safetensors": what error messages call the container.
  virtual std::string_view container_name() const noexcept = 0;
  virtual NamedTensors decode(std::string_view bytes) const = 0;
  virtual std::string encode(const NamedTensors& tensors) const = 0;
};

/// The codec of each format (codec_registry.cpp).
const Codec& codec_for(FileFormat format);

// The codecs, one file each.
const Codec& json_codec();
const Codec& pt_codec();
const Codec& safetensors_codec();
const Codec& trace_codec();

}  // namespace moestat::io::detail
