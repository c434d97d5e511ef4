// HostTensor helpers.
#include <moestat/io/host_tensor.hpp>

namespace moestat::io {

std::int64_t HostTensor::numel() const noexcept {
  std::int64_t count = 1;
  for (std::int64_t size : shape) count *= size;
  return count;
}

void HostTensor::require_element_type(DType wanted) const {
  MOESTAT_CHECK(dtype == wanted, "tensor holds {}, not {}", dtype_name(dtype), dtype_name(wanted));
}

std::vector<std::int64_t> HostTensor::to_int64() const {
  switch (dtype) {
    case DType::kInt64:
      return values<std::int64_t>();
    case DType::kInt32: {
      const std::vector<std::int32_t> narrow = values<std::int32_t>();
      return {narrow.begin(), narrow.end()};
    }
    case DType::kBool: {
      const std::vector<std::uint8_t> flags = values<std::uint8_t>();
      return {flags.begin(), flags.end()};
    }
    case DType::kFloat32:
    case DType::kFloat64:
      break;
  }
  MOESTAT_FAIL("tensor holds {}, not integers", dtype_name(dtype));
}

std::string device_name(Device device) {
  return device.kind == DeviceKind::kCpu ? std::string("cpu")
                                         : fmt::format("cuda:{}", device.index);
}

}  // namespace moestat::io
