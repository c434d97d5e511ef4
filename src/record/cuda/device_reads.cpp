#include "device_reads.hpp"

#include <moestat/error.hpp>

namespace moestat::record::cuda {

DeviceState read_device_state(const DeviceState* state, cudaStream_t stream) {
  DeviceState out{};
  copy_from_device(&out, state, 1, stream);
  MOESTAT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

void fail_unsettled_state(const char* reader) {
  MOESTAT_FAIL("{}: the device state kept changing over {} attempts", reader, kMaxStateReads);
}

}  // namespace moestat::record::cuda
