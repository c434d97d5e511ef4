// The CPU route recorder from eight threads (route_threads.hpp): layer hooks on four threads
// while another opens and ends passes, another changes the placement, another takes and
// another reads the tallies. Run under ThreadSanitizer by scripts/tsan.sh.
#include <gtest/gtest.h>

#include <moestat/routes/cpu_route_recorder.hpp>

#include "routes/route_threads.hpp"

namespace moestat {
namespace {

TEST(RouteRecorderThreads, APassMapsThroughOnePlacementWhateverTheThreads) {
  routes::CpuRouteRecorder recorder(
      test::threads_route_topology(),
      {.max_tokens_per_pass = test::kThreadRows, .capacity_tokens = test::kThreadCapacity});
  std::vector<std::vector<std::int32_t>> ids;
  for (std::int64_t l = 0; l < test::kThreadLayers; ++l) ids.push_back(test::thread_layer_ids(l));
  test::hammer_route_recorder(recorder, [&](std::int64_t layer) {
    const std::int64_t shape[] = {test::kThreadRows, test::kThreadTopK};
    return TensorView::contiguous(ids[std::size_t(layer)].data(), DType::kInt32, shape);
  });
}

}  // namespace
}  // namespace moestat
