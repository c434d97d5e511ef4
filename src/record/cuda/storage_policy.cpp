#include "storage_policy.hpp"

#include <algorithm>
#include <moestat/error.hpp>

#include "token_staging.hpp"

namespace moestat::record::cuda {

StoragePolicy::StoragePolicy(const StorageSetup& setup, TokenStaging* staging)
    : buffers_(setup.buffers),
      mode_(setup.options.mode),
      // Staged ids have no count an engine kernel could add to, and stat_approx counts
      // DeepEP normal dispatch's host counts, which an engine kernel does not see.
      takes_engine_counts_(staging == nullptr && mode_ != RecordMode::kStatApprox),
      staging_(staging) {}

void check_arrival(std::int64_t wanted, std::int64_t arrived) {
  MOESTAT_CHECK(wanted >= 0 && wanted <= arrived,
                "passes_since: arrival {} is outside the {} passes that reached the window", wanted,
                arrived);
}

void StoragePolicy::read_since(PassesSince&, std::uint64_t, std::int64_t,
                               const std::map<std::uint64_t, Placement>&) {
  MOESTAT_FAIL(
      "passes_since needs a recorder that keeps passes (stat, stat_approx or per_pass), not {}",
      record_mode_name(mode_));
}

GpuLoadsSince StoragePolicy::read_gpu_loads_since(
    PassesSince header, std::uint64_t requested_epoch, std::int64_t first_arrival,
    std::int64_t num_gpus, const std::map<std::uint64_t, Placement>& placements) {
  read_since(header, requested_epoch, first_arrival, placements);
  return gpu_loads_of(header, num_gpus);
}

void StoragePolicy::allocate_ring(const StorageSetup& setup, DeviceAllocations& memory,
                                  std::int64_t num_slots) {
  DeviceBuffers& b = setup.buffers;
  b.window = memory.allocate<std::int32_t>(num_slots * b.num_layers * b.num_physical_experts);
  b.slot_pass_ids = memory.allocate<long long>(num_slots);
  b.slot_versions = memory.allocate<unsigned long long>(num_slots);
  b.slot_num_tokens = memory.allocate<long long>(num_slots);
  b.num_slots = num_slots;
}

void StoragePolicy::record_topk(std::int64_t layer, const IdMatrix& ids, const ValidCount& valid,
                                cudaStream_t stream) {
  if (staging_ != nullptr) {
    staging_->stage(layer, ids, valid, stream);
    return;
  }
  launch_record_topk(buffers_, layer, ids, valid, stream);
}

void StoragePolicy::record_topk_layers(std::span<const LayerIds> layers, const ValidCount& valid,
                                       cudaStream_t stream) {
  if (staging_ == nullptr) {
    launch_record_topk_layers(buffers_, layers, valid, stream);
    return;
  }
  // Traces stage each layer's tokens in order: one launch per layer, as record_topk.
  for (const LayerIds& entry : layers) {
    const ValidCount layer_valid{valid.device_count, valid.is_int64,
                                 std::min(valid.host_count, entry.ids.num_rows)};
    staging_->stage(entry.layer, entry.ids, layer_valid, stream);
  }
}

void StoragePolicy::check_hook_outside_pass() const {
  // The host side of a per-token pass (one hook per layer, the rows to copy at end_pass)
  // is tallied between begin_pass and end_pass; hooks captured apart from both escape it.
  MOESTAT_CHECK(staging_ == nullptr,
                "per_token mode on the CUDA recorder takes hooks only inside a pass, also "
                "while capturing: capture begin_pass and end_pass with them");
}

void StoragePolicy::begin_pass(std::int64_t pass_id, cudaStream_t stream) {
  launch_begin_pass(buffers_, pass_id, stream);
}

void StoragePolicy::abort_pass(cudaStream_t stream) { launch_abort_pass(buffers_, stream); }

std::uint64_t StoragePolicy::map_buffer_for(const Placement& /*placement*/,
                                            std::uint64_t current_word) {
  // Only decayed loads convert on the device; elsewhere the maps are never read.
  return current_word & 1;
}

void StoragePolicy::drain_trace() {
  MOESTAT_FAIL("drain_trace: the recorder is in {} mode, not per_token", record_mode_name(mode_));
}

}  // namespace moestat::record::cuda
