// Live metrics' reduction of window passes on the device (Recorder::gpu_loads_since): each
// pass's GPU loads and balancedness, and the counts of each run of passes under one placement
// summed, so a reader copies [n, L, G] + [n] + [runs, L, P] to the host instead of n passes'
// [L, P] rows. The passes are a private copy of their ring slots (device_window_reader.hpp):
// these kernels run after the sequence lock has said which passes are whole, so nothing they
// read can change under them.
#include <cstdint>

#include "cuda_check.hpp"
#include "record_kernels.cuh"

namespace moestat::record::cuda {
namespace {

constexpr int kLoadThreads = 128;
constexpr int kSumThreads = 256;
// As in pass_balancedness (src/core/gpu_loads.cpp): an empty layer scores 1.
constexpr double kBalancednessEpsilon = 1e-5;

/// One block per pass: its [L, G] GPU loads, then (thread 0) its balancedness.
__global__ void __launch_bounds__(kLoadThreads)
    pass_gpu_loads_kernel(const std::int32_t* rows, std::int64_t* gpu_loads, double* balancedness,
                          long long num_layers, long long num_slots, long long num_gpus) {
  const long long pass = blockIdx.x;
  const std::int32_t* counts = rows + pass * num_layers * num_slots;
  std::int64_t* loads = gpu_loads + pass * num_layers * num_gpus;
  const long long slots_per_gpu = num_slots / num_gpus;
  for (long long cell = threadIdx.x; cell < num_layers * num_gpus; cell += blockDim.x) {
    // A GPU's slots are contiguous: slots [g * slots_per_gpu, (g + 1) * slots_per_gpu).
    const std::int32_t* slots =
        counts + cell / num_gpus * num_slots + cell % num_gpus * slots_per_gpu;
    std::int64_t load = 0;
    for (long long slot = 0; slot < slots_per_gpu; ++slot) load += slots[slot];
    loads[cell] = load;
  }
  __syncthreads();  // the loads written above are visible to thread 0
  if (threadIdx.x != 0) return;
  // NOTE: pass_balancedness's operations in its order (every double sum of integer loads is
  // exact, and division is correctly rounded), so the value is bit-equal to the host's.
  double sum = 0.0;
  for (long long layer = 0; layer < num_layers; ++layer) {
    const std::int64_t* row = loads + layer * num_gpus;
    double total = 0.0;
    std::int64_t max = row[0];
    for (long long gpu = 0; gpu < num_gpus; ++gpu) {
      total += static_cast<double>(row[gpu]);
      max = row[gpu] > max ? row[gpu] : max;
    }
    sum += (total / static_cast<double>(num_gpus) + kBalancednessEpsilon) /
           (static_cast<double>(max) + kBalancednessEpsilon);
  }
  balancedness[pass] = num_layers == 0 ? 1.0 : sum / static_cast<double>(num_layers);
}

/// One block per (run, layer): the layer's counts over the run's passes, slot by slot.
__global__ void __launch_bounds__(kSumThreads)
    run_sums_kernel(const std::int32_t* rows, const std::int64_t* run_starts,
                    std::int64_t* run_sums, long long num_layers, long long num_slots) {
  const long long run = blockIdx.x / num_layers;
  const long long layer = blockIdx.x % num_layers;
  const long long first = run_starts[run], end = run_starts[run + 1];
  std::int64_t* sums = run_sums + (run * num_layers + layer) * num_slots;
  // Threads take neighbouring slots, so each pass's row is read in whole lines.
  for (long long slot = threadIdx.x; slot < num_slots; slot += blockDim.x) {
    std::int64_t sum = 0;
    for (long long pass = first; pass < end; ++pass) {
      sum += rows[(pass * num_layers + layer) * num_slots + slot];
    }
    sums[slot] = sum;
  }
}

}  // namespace

void launch_reduce_gpu_loads(const std::int32_t* rows, const std::int64_t* run_starts,
                             std::int64_t* gpu_loads, double* balancedness, std::int64_t* run_sums,
                             std::int64_t num_passes, std::int64_t num_runs,
                             std::int64_t num_layers, std::int64_t num_physical_experts,
                             std::int64_t num_gpus, cudaStream_t stream) {
  if (num_passes == 0) return;
  pass_gpu_loads_kernel<<<unsigned(num_passes), kLoadThreads, 0, stream>>>(
      rows, gpu_loads, balancedness, num_layers, num_physical_experts, num_gpus);
  MOESTAT_CUDA_CHECK(cudaGetLastError());
  if (num_runs * num_layers == 0) return;
  run_sums_kernel<<<unsigned(num_runs * num_layers), kSumThreads, 0, stream>>>(
      rows, run_starts, run_sums, num_layers, num_physical_experts);
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace moestat::record::cuda
