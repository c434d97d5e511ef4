#include "trace_storage.hpp"

#include "device_reads.hpp"

namespace moestat::record::cuda {

TraceStorage::TraceStorage(const StorageSetup& setup)
    : StoragePolicy(setup, &staging_),
      control_stream_(setup.control_stream),
      staging_(setup.buffers, setup.topology.num_layers) {
  allocate_ring(setup, memory_, 1);
  const ModelTopology& model = setup.topology;
  const CudaOptions& options = setup.cuda_options;
  TraceBuffers& trace = setup.buffers.trace;
  trace.top_k = model.top_k;
  trace.max_tokens = options.max_tokens_per_pass;
  trace.staging = memory_.allocate<std::int32_t>(trace.max_tokens * model.num_layers * model.top_k);
  trace.layer_rows = memory_.allocate<std::int32_t>(model.num_layers);
  trace.copy_ticket = memory_.allocate<unsigned int>(1);
  drain_ = std::make_unique<TraceDrain>(
      options.trace_path,
      io::TraceHeader{model.num_layers, model.num_logical_experts, model.num_physical_experts,
                      model.top_k},
      io::TraceWriterOptions{.reserve_bytes = options.trace_reserve_bytes,
                             .copy_threads = options.trace_copy_threads},
      setup.options.per_token_capacity, options.max_pending_passes);
  drain_->describe(trace);
}

TraceStorage::~TraceStorage() {
  cudaStreamSynchronize(copy_stream_.get());
  drain_.reset();  // writes what the last copies published
}

void TraceStorage::begin_pass(std::int64_t pass_id, cudaStream_t stream) {
  staging_.clear();
  StoragePolicy::begin_pass(pass_id, stream);
}

void TraceStorage::end_pass(cudaStream_t stream) {
  launch_trace_close(buffers_, stream);
  // Fork: the copy to the pinned ring runs on the side stream while the pass is published;
  // join before returning, so a capture that ends after end_pass holds both streams' work
  // and the next pass cannot stage ids over tokens still being copied.
  MOESTAT_CUDA_CHECK(cudaEventRecord(fork_.get(), stream));
  MOESTAT_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_.get(), fork_.get(), 0));
  launch_trace_copy(buffers_, staging_.max_rows(), copy_stream_.get());
  MOESTAT_CUDA_CHECK(cudaEventRecord(join_.get(), copy_stream_.get()));
  launch_end_pass(buffers_, kNoDecay, false, stream);
  MOESTAT_CUDA_CHECK(cudaStreamWaitEvent(stream, join_.get(), 0));
}

void TraceStorage::abort_pass(cudaStream_t stream) {
  staging_.clear();
  StoragePolicy::abort_pass(stream);
}

void TraceStorage::read(Snapshot& out, std::uint64_t requested_epoch,
                        const std::map<std::uint64_t, Placement>& /*placements*/) {
  for (int attempt = 0; attempt < kMaxStateReads; ++attempt) {
    const DeviceState before = read_device_state(buffers_.state, control_stream_);
    if (before.seq % 2 != 0) continue;
    // A start or reset has not reached the device yet: nothing recorded belongs to it.
    if (before.applied_epoch != requested_epoch) return;
    const DeviceState after = read_device_state(buffers_.state, control_stream_);
    if (after.seq != before.seq) continue;
    // The tokens themselves are in the trace file.
    out.tallies() = tallies_of(before);
    return;
  }
  fail_unsettled_state("snapshot");
}

void TraceStorage::drain_trace() {
  MOESTAT_CUDA_CHECK(cudaStreamSynchronize(copy_stream_.get()));
  drain_->wait_written();
}

}  // namespace moestat::record::cuda
