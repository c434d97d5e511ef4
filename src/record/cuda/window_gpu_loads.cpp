#include "window_gpu_loads.hpp"

#include <cstring>
#include <moestat/error.hpp>

#include "cuda_check.hpp"
#include "device_reads.hpp"
#include "logical_counts.hpp"
#include "record_kernels.cuh"

namespace moestat::record::cuda {

StreamOrderedBuffer::~StreamOrderedBuffer() {
  if (data_ != nullptr) cudaFreeAsync(data_, stream_);
}

void* StreamOrderedBuffer::reserve(std::size_t bytes) {
  if (bytes <= capacity_) return data_;
  if (data_ != nullptr) MOESTAT_CUDA_CHECK(cudaFreeAsync(data_, stream_));
  data_ = nullptr;
  capacity_ = 0;
  MOESTAT_CUDA_CHECK(cudaMallocAsync(&data_, bytes, stream_));
  capacity_ = bytes;
  return data_;
}

WindowGpuLoads::WindowGpuLoads(const DeviceBuffers& buffers, cudaStream_t stream)
    : buffers_(buffers), stream_(stream), staging_(stream), results_(stream) {}

std::size_t WindowGpuLoads::ring_rows_bytes() const {
  return std::size_t((buffers_.num_slots - 1) * pass_size()) * sizeof(std::int32_t);
}

void WindowGpuLoads::reduce(const std::int32_t* rows, PassRecords& passes, GpuLoadsSince& out,
                            const std::map<std::uint64_t, Placement>& placements) {
  const auto num_passes = std::int64_t(passes.pass_ids.size());
  if (num_passes == 0) return;
  const std::int64_t num_layers = buffers_.num_layers;
  const std::int64_t num_slots = buffers_.num_physical_experts;
  // Runs of consecutive passes under one placement version: versions only grow, so a read
  // has one run, or a few around a rebalance.
  std::vector<std::int64_t> run_starts;
  for (std::int64_t pass = 0; pass < num_passes; ++pass) {
    if (pass == 0 || passes.placement_versions[std::size_t(pass)] !=
                         passes.placement_versions[std::size_t(pass - 1)]) {
      run_starts.push_back(pass);
    }
  }
  const auto num_runs = std::int64_t(run_starts.size());
  run_starts.push_back(num_passes);

  // One buffer, 8-byte elements: [loads | run sums | balancedness] (the outputs, copied back
  // in one piece), then the run starts.
  const std::int64_t loads_size = num_passes * num_layers * out.num_gpus;
  const std::int64_t sums_size = num_runs * num_layers * num_slots;
  const std::int64_t outputs_size = loads_size + sums_size + num_passes;
  auto* device = static_cast<std::int64_t*>(
      results_.reserve(std::size_t(outputs_size + num_runs + 1) * sizeof(std::int64_t)));
  std::int64_t* device_run_starts = device + outputs_size;
  MOESTAT_CUDA_CHECK(cudaMemcpyAsync(device_run_starts, run_starts.data(),
                                     run_starts.size() * sizeof(std::int64_t),
                                     cudaMemcpyHostToDevice, stream_));
  launch_reduce_gpu_loads(
      rows, device_run_starts, device, reinterpret_cast<double*>(device + loads_size + sums_size),
      device + loads_size, num_passes, num_runs, num_layers, num_slots, out.num_gpus, stream_);
  host_results_.resize(std::size_t(outputs_size));
  copy_from_device(host_results_.data(), device, outputs_size, stream_);
  MOESTAT_CUDA_CHECK(cudaStreamSynchronize(stream_));

  out.gpu_loads.assign(host_results_.begin(), host_results_.begin() + loads_size);
  out.balancedness.resize(std::size_t(num_passes));
  std::memcpy(out.balancedness.data(), host_results_.data() + loads_size + sums_size,
              std::size_t(num_passes) * sizeof(double));
  for (std::int64_t run = 0; run < num_runs; ++run) {
    const std::uint64_t version =
        passes.placement_versions[std::size_t(run_starts[std::size_t(run)])];
    const auto placement = placements.find(version);
    MOESTAT_CHECK(placement != placements.end(), "no placement of version {} is known", version);
    detail::add_logical_counts(placement->second,
                               host_results_.data() + loads_size + run * num_layers * num_slots,
                               out.logical_totals.data());
  }
  out.pass_rows() = std::move(passes.pass_rows());
}

}  // namespace moestat::record::cuda
