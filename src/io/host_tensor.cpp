// HostTensor helpers.
#include <moestat/io/host_tensor.hpp>

namespace moestat::io {
namespace {

template <typename T>
std::vector<std::int64_t> widened(const std::vector<std::byte>& data) {
  std::vector<std::int64_t> out(data.size() / sizeof(T));
  for (std::size_t i = 0; i < out.size(); ++i) {
    T value;
    std::memcpy(&value, data.data() + i * sizeof(T), sizeof(T));
    out[i] = value;
  }
  return out;
}

}  // namespace

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
    case DType::kBool:
    case DType::kUInt8:
      return widened<std::uint8_t>(data);
    case DType::kInt16:
      return widened<std::int16_t>(data);
    case DType::kUInt16:
      return widened<std::uint16_t>(data);
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

Device device_of_name(std::string_view name) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda") return Device::cuda(0);
  constexpr std::string_view kCuda = "cuda:";
  MOESTAT_CHECK(name.size() > kCuda.size() && name.size() <= kCuda.size() + 4 &&
                    name.substr(0, kCuda.size()) == kCuda,
                "device or storage location \"{}\" is not supported (want cpu or cuda:N)", name);
  int index = 0;
  for (char c : name.substr(kCuda.size())) {
    MOESTAT_CHECK(c >= '0' && c <= '9',
                  "device or storage location \"{}\" is not supported (want cpu or cuda:N)", name);
    index = index * 10 + (c - '0');
  }
  return Device::cuda(index);
}

}  // namespace moestat::io
