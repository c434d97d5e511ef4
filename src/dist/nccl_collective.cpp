// NcclCollective: host arrays staged through device buffers, ncclAllReduce and ncclAllGather
// (which needs equal lengths, so a gather sends its lengths first and pads to the longest).
// Within a reduction with a deadline, every wait polls (the NCCL call's state, the stream)
// and the communicator is aborted at the deadline, since NCCL has no timeout of its own.
#include <algorithm>
#include <moestat/dist/nccl.hpp>
#include <moestat/error.hpp>
#include <type_traits>

#include "cuda_check.hpp"

namespace moestat::dist {
namespace {

using Clock = std::chrono::steady_clock;

/// Up to 1 ms between polls: a reduction is outside the forward pass, and the GPU does the
/// work.
constexpr PollPauses kPauses{std::chrono::microseconds(10), std::chrono::milliseconds(1)};

void check(ncclResult_t result, const char* call) {
  MOESTAT_CHECK(result == ncclSuccess, "{} failed: {}", call, ncclGetErrorString(result));
}

/// A device buffer for one call. release() leaks it: after an abort at a deadline, a kernel
/// NCCL has not yet stopped may still touch it, and cudaFree would wait for that kernel.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) {
    if (bytes > 0) MOESTAT_CUDA_CHECK(cudaMalloc(&data_, bytes));
  }
  ~DeviceBuffer() {
    if (!released_) cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return data_; }
  void release() { released_ = true; }

 private:
  void* data_ = nullptr;
  bool released_ = false;
};

/// Releases the buffers of a call if it throws (a timeout or an error mid-collective).
class ReleaseOnThrow {
 public:
  explicit ReleaseOnThrow(std::initializer_list<DeviceBuffer*> buffers) : buffers_(buffers) {}
  ReleaseOnThrow(const ReleaseOnThrow&) = delete;
  ReleaseOnThrow& operator=(const ReleaseOnThrow&) = delete;
  ~ReleaseOnThrow() {
    if (std::uncaught_exceptions() > exceptions_) {
      for (DeviceBuffer* buffer : buffers_) buffer->release();
    }
  }

 private:
  std::vector<DeviceBuffer*> buffers_;
  int exceptions_ = std::uncaught_exceptions();
};

template <typename T>
constexpr ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, std::int64_t>) return ncclInt64;
  if constexpr (std::is_same_v<T, std::int32_t>) return ncclInt32;
  if constexpr (std::is_same_v<T, double>) return ncclFloat64;
}

/// Polls a non-blocking communicator until its pending call has left ncclInProgress; false
/// at the deadline. Any other error throws, naming `call`.
bool settle(ncclComm_t communicator, Clock::time_point deadline, const char* call) {
  return poll_until(deadline, kPauses, [&] {
    ncclResult_t state = ncclSuccess;
    check(ncclCommGetAsyncError(communicator, &state), "ncclCommGetAsyncError");
    if (state == ncclInProgress) return false;
    check(state, call);
    return true;
  });
}

}  // namespace

ncclComm_t make_nonblocking_communicator(const ncclUniqueId& id, int num_ranks, int rank,
                                         Clock::time_point deadline) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t communicator = nullptr;
  const ncclResult_t result = ncclCommInitRankConfig(&communicator, num_ranks, id, rank, &config);
  if (result != ncclInProgress) check(result, "ncclCommInitRankConfig");
  if (!settle(communicator, deadline, "ncclCommInitRankConfig")) {
    ncclCommAbort(communicator);
    MOESTAT_FAIL(
        "ncclCommInitRankConfig: rank {} of {}: not every rank joined the communicator by the "
        "deadline; aborted",
        rank, num_ranks);
  }
  return communicator;
}

NcclCollective::NcclCollective(ncclComm_t communicator, cudaStream_t stream)
    : communicator_(communicator), stream_(stream), deadline_(kPauses) {
  check(ncclCommUserRank(communicator_, &rank_), "ncclCommUserRank");
  check(ncclCommCount(communicator_, &size_), "ncclCommCount");
}

void NcclCollective::start_reduction(Clock::time_point deadline) {
  MOESTAT_CHECK(!aborted_,
                "allreduce_snapshot: this NCCL communicator was aborted at an earlier deadline");
  deadline_.start(deadline);
}

void NcclCollective::abort(const char* call) {
  // NOTE: abort, not destroy: destroy waits for the operations in flight, which may never end.
  ncclCommAbort(communicator_);
  aborted_ = true;
  deadline_.fail_incomplete(call, rank_,
                            "a rank did not arrive or stopped taking part (NCCL cannot say "
                            "which); the communicator was aborted (ncclCommAbort) and must "
                            "not be used or destroyed");
}

void NcclCollective::complete(ncclResult_t result, const char* call) {
  if (!deadline_.active()) {
    check(result, call);
    MOESTAT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return;
  }
  if (result != ncclInProgress) check(result, call);
  if (!settle(communicator_, deadline_.when(), call)) abort(call);
  // The collective is enqueued; it ends when every rank's part has run. A remote rank's
  // failure shows as an asynchronous error of the communicator, so both are polled.
  const bool done = deadline_.poll([&] {
    ncclResult_t state = ncclSuccess;
    check(ncclCommGetAsyncError(communicator_, &state), "ncclCommGetAsyncError");
    if (state != ncclInProgress) check(state, call);
    const cudaError_t stream_state = cudaStreamQuery(stream_);
    if (stream_state == cudaErrorNotReady) return false;
    MOESTAT_CUDA_CHECK(stream_state);
    return true;
  });
  if (!done) abort(call);
}

template <typename T>
void NcclCollective::sum_on_device(std::span<T> values) {
  if (values.empty()) return;  // the same on every rank: the sizes were checked to agree
  DeviceBuffer buffer(values.size_bytes());
  const ReleaseOnThrow release({&buffer});
  MOESTAT_CUDA_CHECK(cudaMemcpyAsync(buffer.get(), values.data(), values.size_bytes(),
                                     cudaMemcpyHostToDevice, stream_));
  complete(ncclAllReduce(buffer.get(), buffer.get(), values.size(), nccl_type<T>(), ncclSum,
                         communicator_, stream_),
           "ncclAllReduce");
  // NOTE: only now: a copy into pageable host memory blocks the host until the work before
  // it on the stream is done, which would wait past the deadline.
  MOESTAT_CUDA_CHECK(cudaMemcpyAsync(values.data(), buffer.get(), values.size_bytes(),
                                     cudaMemcpyDeviceToHost, stream_));
  MOESTAT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

/// All ranks' arrays of `width` elements, rank after rank.
template <typename T>
std::vector<T> NcclCollective::gather_equal(std::span<const T> local, std::size_t width) {
  std::vector<T> out(width * std::size_t(size_));
  if (width == 0) return out;  // every rank's array is empty (width is the same everywhere)
  DeviceBuffer send(width * sizeof(T));
  DeviceBuffer receive(out.size() * sizeof(T));
  const ReleaseOnThrow release({&send, &receive});
  MOESTAT_CUDA_CHECK(cudaMemsetAsync(send.get(), 0, width * sizeof(T), stream_));
  if (!local.empty()) {
    MOESTAT_CUDA_CHECK(cudaMemcpyAsync(send.get(), local.data(), local.size_bytes(),
                                       cudaMemcpyHostToDevice, stream_));
  }
  complete(ncclAllGather(send.get(), receive.get(), width, nccl_type<T>(), communicator_, stream_),
           "ncclAllGather");
  MOESTAT_CUDA_CHECK(cudaMemcpyAsync(out.data(), receive.get(), out.size() * sizeof(T),
                                     cudaMemcpyDeviceToHost, stream_));
  MOESTAT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return out;
}

template <typename T>
std::vector<T> NcclCollective::gather_any(std::span<const T> local) {
  const std::int64_t length = std::int64_t(local.size());
  const std::vector<std::int64_t> lengths = gather_equal<std::int64_t>(std::span(&length, 1), 1);
  const auto longest = std::size_t(*std::max_element(lengths.begin(), lengths.end()));
  const std::vector<T> padded = gather_equal(local, longest);
  std::vector<T> out;
  for (int r = 0; r < size_; ++r) {
    const auto first = padded.begin() + std::ptrdiff_t(std::size_t(r) * longest);
    out.insert(out.end(), first, first + std::ptrdiff_t(lengths[std::size_t(r)]));
  }
  return out;
}

void NcclCollective::sum(std::span<std::int64_t> values) { sum_on_device(values); }

void NcclCollective::sum(std::span<double> values) { sum_on_device(values); }

std::vector<std::int64_t> NcclCollective::gather(std::span<const std::int64_t> local) {
  return gather_any(local);
}

std::vector<std::int32_t> NcclCollective::gather(std::span<const std::int32_t> local) {
  return gather_any(local);
}

}  // namespace moestat::dist
