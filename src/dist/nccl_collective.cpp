// NcclCollective: host arrays staged through device buffers, ncclAllReduce and ncclAllGather
// (which needs equal lengths, so a gather sends its lengths first and pads to the longest).
#include <algorithm>
#include <moestat/dist/nccl.hpp>
#include <moestat/error.hpp>
#include <type_traits>

#include "../record/cuda/cuda_check.hpp"

namespace moestat::dist {
namespace {

void check(ncclResult_t result, const char* call) {
  MOESTAT_CHECK(result == ncclSuccess, "{} failed: {}", call, ncclGetErrorString(result));
}

/// A device buffer for one call.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) {
    if (bytes > 0) MOESTAT_CUDA_CHECK(cudaMalloc(&data_, bytes));
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return data_; }

 private:
  void* data_ = nullptr;
};

template <typename T>
constexpr ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, std::int64_t>) return ncclInt64;
  if constexpr (std::is_same_v<T, std::int32_t>) return ncclInt32;
  if constexpr (std::is_same_v<T, double>) return ncclFloat64;
}

template <typename T>
void sum_on_device(std::span<T> values, ncclComm_t communicator, cudaStream_t stream) {
  if (values.empty()) return;  // the same on every rank: the sizes were checked to agree
  DeviceBuffer buffer(values.size_bytes());
  MOESTAT_CUDA_CHECK(cudaMemcpyAsync(buffer.get(), values.data(), values.size_bytes(),
                                     cudaMemcpyHostToDevice, stream));
  check(ncclAllReduce(buffer.get(), buffer.get(), values.size(), nccl_type<T>(), ncclSum,
                      communicator, stream),
        "ncclAllReduce");
  MOESTAT_CUDA_CHECK(cudaMemcpyAsync(values.data(), buffer.get(), values.size_bytes(),
                                     cudaMemcpyDeviceToHost, stream));
  MOESTAT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

/// All ranks' arrays of `width` elements, rank after rank.
template <typename T>
std::vector<T> gather_equal(std::span<const T> local, std::size_t width, int num_ranks,
                            ncclComm_t communicator, cudaStream_t stream) {
  std::vector<T> out(width * std::size_t(num_ranks));
  if (width == 0) return out;  // every rank's array is empty (width is the same everywhere)
  DeviceBuffer send(width * sizeof(T));
  DeviceBuffer receive(out.size() * sizeof(T));
  MOESTAT_CUDA_CHECK(cudaMemsetAsync(send.get(), 0, width * sizeof(T), stream));
  if (!local.empty()) {
    MOESTAT_CUDA_CHECK(cudaMemcpyAsync(send.get(), local.data(), local.size_bytes(),
                                       cudaMemcpyHostToDevice, stream));
  }
  check(ncclAllGather(send.get(), receive.get(), width, nccl_type<T>(), communicator, stream),
        "ncclAllGather");
  MOESTAT_CUDA_CHECK(cudaMemcpyAsync(out.data(), receive.get(), out.size() * sizeof(T),
                                     cudaMemcpyDeviceToHost, stream));
  MOESTAT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

template <typename T>
std::vector<T> gather_any(std::span<const T> local, int num_ranks, ncclComm_t communicator,
                          cudaStream_t stream) {
  const std::int64_t length = std::int64_t(local.size());
  const std::vector<std::int64_t> lengths =
      gather_equal<std::int64_t>(std::span(&length, 1), 1, num_ranks, communicator, stream);
  const auto longest = std::size_t(*std::max_element(lengths.begin(), lengths.end()));
  const std::vector<T> padded = gather_equal(local, longest, num_ranks, communicator, stream);
  std::vector<T> out;
  for (int r = 0; r < num_ranks; ++r) {
    const auto first = padded.begin() + std::ptrdiff_t(std::size_t(r) * longest);
    out.insert(out.end(), first, first + std::ptrdiff_t(lengths[std::size_t(r)]));
  }
  return out;
}

}  // namespace

NcclCollective::NcclCollective(ncclComm_t communicator, cudaStream_t stream)
    : communicator_(communicator), stream_(stream) {
  check(ncclCommUserRank(communicator_, &rank_), "ncclCommUserRank");
  check(ncclCommCount(communicator_, &size_), "ncclCommCount");
}

void NcclCollective::sum(std::span<std::int64_t> values) {
  sum_on_device(values, communicator_, stream_);
}

void NcclCollective::sum(std::span<double> values) {
  sum_on_device(values, communicator_, stream_);
}

std::vector<std::int64_t> NcclCollective::gather(std::span<const std::int64_t> local) {
  return gather_any(local, size_, communicator_, stream_);
}

std::vector<std::int32_t> NcclCollective::gather(std::span<const std::int32_t> local) {
  return gather_any(local, size_, communicator_, stream_);
}

}  // namespace moestat::dist
