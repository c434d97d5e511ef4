// The codec of each file format: a new format is registered here.
#include "codec.hpp"

namespace moestat::io::detail {

const Codec& codec_for(FileFormat format) {
  switch (format) {
    case FileFormat::kJson:
      return json_codec();
    case FileFormat::kPt:
      return pt_codec();
    case FileFormat::kSafetensors:
      return safetensors_codec();
    case FileFormat::kTrace:
      return trace_codec();
  }
  MOESTAT_FAIL("internal: no codec for file format {}", int(format));
}

}  // namespace moestat::io::detail
