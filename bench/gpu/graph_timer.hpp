// Timing of captured CUDA graphs, shared by the GPU benchmarks: median of repeated replays.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "cuda_check.hpp"

namespace moestat::bench {

constexpr int kReplays = 60;

/// Median milliseconds of one replay of `exec`.
inline double median_replay_ms(cudaGraphExec_t exec, cudaStream_t stream) {
  cudaEvent_t start, stop;
  MOESTAT_CUDA_CHECK(cudaEventCreate(&start));
  MOESTAT_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 5; ++i) MOESTAT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  std::vector<float> times;
  for (int i = 0; i < kReplays; ++i) {
    MOESTAT_CUDA_CHECK(cudaEventRecord(start, stream));
    MOESTAT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MOESTAT_CUDA_CHECK(cudaEventRecord(stop, stream));
    MOESTAT_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    MOESTAT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return times[times.size() / 2];
}

/// Captures `body` into a graph and returns the median replay time in microseconds.
inline double graph_us(cudaStream_t stream, const std::function<void()>& body) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MOESTAT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  body();
  MOESTAT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MOESTAT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double us = median_replay_ms(exec, stream) * 1000.0;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return us;
}

}  // namespace moestat::bench
