// The CPU backend of the route recorder: the scratch rows and the row store in host memory,
// the routers' ids read from host memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <moestat/routes/route_recorder.hpp>
#include <mutex>
#include <vector>

namespace moestat::routes {

class CpuRouteRecorder final : public RouteRecorder {
 public:
  CpuRouteRecorder(ModelTopology topology, RouteRecorderOptions options);

 private:
  void do_begin_pass() override;
  void do_record(std::span<const ColumnIds> layers) override;
  void do_end_pass(std::span<const RowMove> moves) override;
  void do_abort_pass() override { advance_stamp(); }
  void do_read_rows(std::span<const std::int32_t> rows,
                    std::span<const ReadTarget> targets) override;
  void do_set_placement(std::span<const std::int32_t> physical_to_logical) override;
  BackendTallies do_backend_tallies() const override;

  std::int64_t row_id_bytes() const noexcept;
  void advance_stamp() noexcept;

  // Hooks of several threads write the scratch one at a time: two writing one layer would
  // race on its stamps.
  std::mutex record_mutex_;
  // Scratch, one row per batch row: ids, the pass that wrote each (row, column), and the pass
  // that found its ids invalid, so no pass needs to clear what the previous one wrote.
  std::vector<std::byte> scratch_ids_;          // [max_tokens_per_pass, C, K]
  std::vector<std::uint32_t> scratch_stamps_;   // [max_tokens_per_pass, C]
  std::vector<std::uint32_t> scratch_invalid_;  // [max_tokens_per_pass, C]
  std::uint32_t pass_stamp_ = 1;
  std::vector<std::byte> ids_;                          // [capacity, C, K] of the id dtype
  std::vector<std::byte> valid_;                        // [capacity, C]
  std::vector<std::int32_t> physical_to_logical_;       // [C, P], of the open pass
  std::vector<std::int32_t> next_physical_to_logical_;  // set_placement's, from the next pass
  std::int64_t invalid_ids_ = 0;  // counted at end_pass, read by tallies(): both under the lock
  std::atomic<std::int64_t> layers_written_twice_{0};  // counted by hooks, read by any thread
};

}  // namespace moestat::routes
