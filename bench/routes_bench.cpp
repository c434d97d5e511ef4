// The host side of the per-request route recorder in a decode: each pass, begin_pass() and
// end_pass(batch) of `batch` requests one token each, and every 64 passes one take_many() of
// them all, as a trainer-bound engine reads them. Two recorders at Qwen3-30B-A3B's shape (48
// MoE layers, 128 experts, top-8):
// - BM_RouteTable: the RouteRecorder's own table (checks, row plan, commit, take) over a
//   backend that does nothing: the host work every backend pays per pass, the CUDA one
//   included (where the rows themselves move on the device);
// - BM_RouteEndPass: the same without the take;
// - BM_CpuRoutePass: the CPU backend whole, with its 48 record_topk() per pass and its copies.
// Every 64 passes the requests finish and new ones (new names) take their place, so the table
// sees requests come and go as an engine's does.
//
// Each iteration is one pass (its time the pass's, the take's share included). Run (Release
// build):
//   moestat_bench_routes --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//                        --benchmark_out=bench/results/routes_host_<date>.json
#include <benchmark/benchmark.h>

#include <cstdint>
#include <moestat/routes/cpu_route_recorder.hpp>
#include <string>
#include <vector>

namespace moestat::bench {
namespace {

constexpr std::int64_t kNumLayers = 48;
constexpr std::int64_t kNumExperts = 128;
constexpr std::int64_t kTopK = 8;
constexpr std::int64_t kPassesPerTake = 64;

ModelTopology qwen3_30b_a3b() { return ModelTopology::uniform(kNumLayers, kNumExperts, kTopK); }

routes::RouteRecorderOptions decode_options(std::int64_t batch) {
  return {.max_tokens_per_pass = batch, .capacity_tokens = batch * kPassesPerTake};
}

/// A backend that moves nothing: what is left is the table every backend shares.
class TableOnlyRecorder final : public routes::RouteRecorder {
 public:
  using RouteRecorder::RouteRecorder;

 private:
  void do_begin_pass() override {}
  void do_record(std::span<const ColumnIds>) override {}
  void do_end_pass(std::span<const RowMove> moves) override {
    benchmark::DoNotOptimize(moves.data());
  }
  void do_abort_pass() override {}
  void do_read_rows(std::span<const std::int32_t> rows, std::span<const ReadTarget>) override {
    benchmark::DoNotOptimize(rows.data());
  }
  void do_set_placement(std::span<const std::int32_t>) override {}
  BackendTallies do_backend_tallies() const override { return {}; }
};

/// `batch` requests one token each, renamed every kPassesPerTake passes.
class DecodeBatch {
 public:
  explicit DecodeBatch(std::int64_t batch) : spans_(std::size_t(batch)) { rename(); }

  std::span<const routes::TokenSpan> next_pass() {
    for (routes::TokenSpan& span : spans_) {
      span.first_position = position_;
      span.num_tokens = 1;
    }
    ++position_;
    return spans_;
  }
  const std::vector<std::string>& names() const { return names_; }
  void rename() {
    names_.clear();
    for (routes::TokenSpan& span : spans_) {
      span.request_id = "request-" + std::to_string(next_name_++);
      names_.push_back(span.request_id);
    }
    position_ = 0;
  }

 private:
  std::vector<routes::TokenSpan> spans_;
  std::vector<std::string> names_;
  std::int64_t position_ = 0;
  std::int64_t next_name_ = 0;
};

void finish_every_64(routes::RouteRecorder& recorder, DecodeBatch& batch, std::int64_t pass) {
  if ((pass + 1) % kPassesPerTake != 0) return;
  benchmark::DoNotOptimize(recorder.finish_many(batch.names()));
  batch.rename();
}

/// A decode through the table alone; the finish every 64 passes timed or not.
void decode_through_table(benchmark::State& state, bool time_the_finish) {
  const std::int64_t batch_size = state.range(0);
  TableOnlyRecorder recorder(qwen3_30b_a3b(), decode_options(batch_size));
  DecodeBatch batch(batch_size);
  std::int64_t pass = 0;
  for (auto _ : state) {
    recorder.begin_pass();
    recorder.end_pass(batch.next_pass());
    if (time_the_finish) {
      finish_every_64(recorder, batch, pass);
    } else if ((pass + 1) % kPassesPerTake == 0) {
      state.PauseTiming();
      finish_every_64(recorder, batch, pass);
      state.ResumeTiming();
    }
    ++pass;
  }
}

void BM_RouteTable(benchmark::State& state) { decode_through_table(state, true); }

// BM_RouteTable without the take: begin_pass() and end_pass(batch) alone. Most of a take's
// time is the first touch of the routes it hands out (a batch of 256 requests' 64 tokens is
// 7.1 MB), which says nothing of the table.
void BM_RouteEndPass(benchmark::State& state) { decode_through_table(state, false); }

void BM_CpuRoutePass(benchmark::State& state) {
  const std::int64_t batch_size = state.range(0);
  routes::CpuRouteRecorder recorder(qwen3_30b_a3b(), decode_options(batch_size));
  DecodeBatch batch(batch_size);
  std::vector<std::int32_t> ids(std::size_t(batch_size * kTopK));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t((i * 37) % kNumExperts);
  const std::int64_t shape[] = {batch_size, kTopK};
  const TensorView topk = TensorView::contiguous(ids.data(), DType::kInt32, shape);
  std::int64_t pass = 0;
  for (auto _ : state) {
    recorder.begin_pass();
    for (std::int64_t layer = 0; layer < kNumLayers; ++layer) recorder.record_topk(layer, topk);
    recorder.end_pass(batch.next_pass());
    finish_every_64(recorder, batch, pass++);
  }
}

BENCHMARK(BM_RouteTable)->Arg(1)->Arg(16)->Arg(64)->Arg(256);
BENCHMARK(BM_RouteEndPass)->Arg(1)->Arg(16)->Arg(64)->Arg(256);
BENCHMARK(BM_CpuRoutePass)->Arg(1)->Arg(16)->Arg(64)->Arg(256);

}  // namespace
}  // namespace moestat::bench

BENCHMARK_MAIN();
