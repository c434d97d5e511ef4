#include "demo_device.hpp"

#include <chrono>
#include <moestat/error.hpp>
#include <moestat/record/cpu_recorder.hpp>
#ifdef MOESTAT_HAS_CUDA
#include <cuda_runtime_api.h>

#include <moestat/record/cuda_recorder.hpp>
#endif

namespace moestat::cli {

#ifdef MOESTAT_HAS_CUDA
namespace {

void check_cuda(cudaError_t status, const char* what) {
  MOESTAT_CHECK(status == cudaSuccess, "demo on the GPU: {} failed: {}", what,
                cudaGetErrorString(status));
}

}  // namespace

/// One device buffer the ids of every layer pass through, grown to the largest batch.
struct DemoRecorder::DeviceIds {
  std::int32_t* data = nullptr;
  std::size_t capacity = 0;

  ~DeviceIds() { cudaFree(data); }
  void upload(const std::vector<std::int32_t>& ids) {
    if (ids.size() > capacity) {
      check_cuda(cudaDeviceSynchronize(), "waiting for the recorder");
      cudaFree(data);
      data = nullptr;
      check_cuda(cudaMalloc(reinterpret_cast<void**>(&data), ids.size() * sizeof(std::int32_t)),
                 "allocating the id buffer");
      capacity = ids.size();
    }
    // A synchronous copy on the legacy stream: it waits for the kernel that read the last
    // layer's ids before it overwrites them.
    check_cuda(
        cudaMemcpy(data, ids.data(), ids.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice),
        "copying ids to the GPU");
  }
};
#else
struct DemoRecorder::DeviceIds {};
#endif

DemoRecorder::DemoRecorder(const std::string& device, const ModelTopology& topology,
                           const RecorderOptions& options) {
  if (device == "cpu") {
    recorder_ = std::make_unique<record::CpuRecorder>(topology, options);
    description_ = "CPU";
    return;
  }
  MOESTAT_CHECK(device == "cuda", "unknown device '{}': expected cpu or cuda", device);
#ifdef MOESTAT_HAS_CUDA
  int count = 0;
  MOESTAT_CHECK(cudaGetDeviceCount(&count) == cudaSuccess && count > 0,
                "--device cuda: no CUDA device is visible on this machine");
  cudaDeviceProp properties{};
  check_cuda(cudaGetDeviceProperties(&properties, 0), "reading the device's properties");
  recorder_ = std::make_unique<record::CudaRecorder>(topology, options, 0);
  device_ids_ = std::make_unique<DeviceIds>();
  description_ = properties.name;
#else
  MOESTAT_FAIL(
      "--device cuda: this build has no CUDA recorder (nvcc was not found when it "
      "was built)");
#endif
}

DemoRecorder::~DemoRecorder() = default;

double DemoRecorder::record(std::int64_t layer, const std::vector<std::int32_t>& ids,
                            std::int64_t rows, std::int64_t top_k, std::int64_t valid) {
  const void* data = ids.data();
  Device where = Device::cpu();
#ifdef MOESTAT_HAS_CUDA
  if (device_ids_ != nullptr) {
    device_ids_->upload(ids);
    data = device_ids_->data;
    where = Device::cuda(0);
  }
#endif
  const TensorView view = TensorView::contiguous(data, DType::kInt32, {rows, top_k}, where);
  const auto start = std::chrono::steady_clock::now();
  recorder_->record_topk(layer, view, valid);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void DemoRecorder::finish() {
#ifdef MOESTAT_HAS_CUDA
  if (device_ids_ != nullptr) check_cuda(cudaDeviceSynchronize(), "waiting for the recorder");
#endif
}

}  // namespace moestat::cli
