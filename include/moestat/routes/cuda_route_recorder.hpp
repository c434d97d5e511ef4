// The CUDA backend of the route recorder: scratch rows and the row store in device memory,
// written by one kernel launch per 64 layers; safe inside captured CUDA graphs (the layer hooks
// only enqueue that kernel, which stamps its rows with a device-side pass counter).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <moestat/routes/route_recorder.hpp>

namespace moestat::routes {

/// Records on the current CUDA device (the one current when it is made).
///
/// In a captured CUDA graph: capture the forward with the layer hooks inside (no pass need
/// be open while the stream is captured), then around each replay call begin_pass() and
/// end_pass(batch) on the host, on the stream the graph replays on (set_stream). begin_pass,
/// end_pass and abort_pass themselves are refused while the stream is being captured.
///
/// end_pass enqueues one kernel, with the pass's row moves in its parameters up to 256 tokens;
/// larger batches' moves go through a ring of pinned host buffers first, and end_pass waits
/// for the GPU only when the host runs more than kMoveSlots such passes ahead of it. take()
/// waits for the passes it reads, on a stream of its own.
class CudaRouteRecorder final : public RouteRecorder {
 public:
  static constexpr int kMoveSlots = 16;

  CudaRouteRecorder(ModelTopology topology, RouteRecorderOptions options);
  ~CudaRouteRecorder() override;

  /// The stream hooks enqueue on (default: the legacy default stream).
  void set_stream(cudaStream_t stream) noexcept { stream_ = stream; }
  cudaStream_t stream() const noexcept { return stream_; }

 private:
  struct Device;

  void do_begin_pass() override;
  void do_record(std::span<const ColumnIds> layers) override;
  void do_end_pass(std::span<const RowMove> moves) override;
  void do_abort_pass() override;
  void do_read_rows(std::span<const std::int32_t> rows,
                    std::span<const ReadTarget> targets) override;
  void do_set_placement(std::span<const std::int32_t> physical_to_logical) override;
  BackendTallies do_backend_tallies() const override;
  bool accepts_hooks_outside_pass() const override;
  void check_pass_control(const char* call) const override;

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Device> device_;
};

}  // namespace moestat::routes
