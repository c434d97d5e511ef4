#include "device_window_reader.hpp"

#include <algorithm>

namespace moestat::record::cuda {

std::optional<WindowRead> DeviceWindowReader::read_from(const DeviceState& before,
                                                        long long first_wanted,
                                                        std::int32_t* device_rows,
                                                        cudaStream_t stream, PassRecords& out) {
  const long long window = buffers_.num_slots - 1;
  const long long pass_size = buffers_.num_layers * buffers_.num_physical_experts;
  // Slots of passes [first, cursor), in at most two contiguous runs of the ring.
  const long long first = std::max(first_wanted, before.cursor - window);
  std::int32_t* rows = device_rows;
  cudaMemcpyKind direction = cudaMemcpyDeviceToDevice;
  if (device_rows == nullptr) {
    ring_counts_.resize(std::size_t((before.cursor - first) * pass_size));
    rows = ring_counts_.data();
    direction = cudaMemcpyDeviceToHost;
  }
  for (long long pass = first; pass < before.cursor;) {
    const long long slot = pass % buffers_.num_slots;
    const long long run = std::min(before.cursor - pass, buffers_.num_slots - slot);
    MOESTAT_CUDA_CHECK(
        cudaMemcpyAsync(rows + (pass - first) * pass_size, buffers_.window + slot * pass_size,
                        std::size_t(run * pass_size) * sizeof(std::int32_t), direction, stream));
    pass += run;
  }
  copy_from_device(slot_pass_ids_, buffers_.slot_pass_ids, buffers_.num_slots, stream);
  copy_from_device(slot_num_tokens_, buffers_.slot_num_tokens, buffers_.num_slots, stream);
  copy_from_device(slot_versions_, buffers_.slot_versions, buffers_.num_slots, stream);
  const DeviceState after = read_device_state(buffers_.state, stream);
  if (after.applied_epoch != before.applied_epoch) return std::nullopt;

  // Pass n's slot is rewritten by the end of pass n + window + 1, which runs while the
  // cursor is n + window + 1: passes from after.cursor - window on were intact.
  const long long intact_from = std::max(first, after.cursor - window);
  for (long long pass = intact_from; pass < before.cursor; ++pass) {
    const auto slot = std::size_t(pass % buffers_.num_slots);
    out.push_back(slot_pass_ids_[slot], slot_versions_[slot], slot_num_tokens_[slot]);
    if (device_rows != nullptr) continue;
    const std::int32_t* in = ring_counts_.data() + (pass - first) * pass_size;
    out.physical_counts.insert(out.physical_counts.end(), in, in + pass_size);
  }
  return WindowRead{before, intact_from, first};
}

}  // namespace moestat::record::cuda
