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

RecordTallies tallies_of(const DeviceState& state) {
  return {.num_passes = state.cursor - state.base,
          .dropped_ids = std::int64_t(state.dropped_ids),
          .dropped_tokens = std::int64_t(state.dropped_tokens),
          .dropped_passes = 0};
}

}  // namespace moestat::record::cuda
