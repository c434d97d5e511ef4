// The CPU route recorder against the naive reference (route_reference.hpp): random passes of
// several requests through a placement with replicas, hostile ids, padding rows; incremental
// takes; and each rule of the table (capacity, gaps, positions routed again, aborts, layers
// written twice, a control thread taking while passes run).
#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <moestat/routes/cpu_route_recorder.hpp>
#include <thread>

#include "routes/route_reference.hpp"
#include "unit/expect_error.hpp"

namespace moestat {
namespace {

using routes::CpuRouteRecorder;
using routes::RoutedExperts;
using routes::TokenSpan;

ModelTopology small_topology() {
  // Layers 0 and 2 dense; 6 experts on 8 slots (two replicated); top-3.
  ModelTopology topology = ModelTopology::uniform(5, 6, 3);
  topology.moe_layers = {false, true, false, true, true};
  topology.num_physical_experts = 8;
  topology.ep_size = 2;
  return topology;
}

Placement replicated_placement(const ModelTopology& topology) {
  std::vector<std::int32_t> map;
  for (std::int64_t l = 0; l < topology.num_layers; ++l) {
    for (std::int64_t p = 0; p < topology.num_physical_experts; ++p) {
      // Slots 6 and 7 repeat experts that differ by layer.
      map.push_back(std::int32_t(p < 6 ? (p + l) % 6 : (l + p) % 6));
    }
  }
  return Placement(topology.num_layers, topology.num_physical_experts, topology.num_logical_experts,
                   map, 3);
}

void run_pass(routes::RouteRecorder& recorder, const test::RoutePass& pass) {
  recorder.begin_pass();
  for (std::int64_t c = 0; c < recorder.layout().num_columns(); ++c) {
    const std::int64_t shape[] = {pass.num_rows, recorder.layout().top_k};
    recorder.record_topk(
        recorder.layout().layers[std::size_t(c)],
        TensorView::contiguous(pass.ids[std::size_t(c)].data(), DType::kInt32, shape));
  }
  recorder.end_pass(pass.batch);
}

void expect_matches(const RoutedExperts& routes,
                    const std::map<std::int64_t, test::ExpectedRow>& expected) {
  routes.validate();
  for (std::int64_t t = 0; t < routes.num_tokens(); ++t) {
    const std::int64_t position = routes.first_position + t;
    const auto found = expected.find(position);
    for (std::int64_t c = 0; c < routes.layout.num_columns(); ++c) {
      const bool valid = found != expected.end() && found->second.valid[std::size_t(c)];
      ASSERT_EQ(routes.is_valid(t, c), valid) << routes.request_id << " position " << position;
      for (std::int64_t k = 0; k < routes.layout.top_k; ++k) {
        const std::int64_t want =
            valid ? found->second.ids[std::size_t(c * routes.layout.top_k + k)] : 0;
        ASSERT_EQ(routes.id(t, c, k), want) << routes.request_id << " position " << position;
      }
    }
  }
}

TEST(RouteRecorder, EqualsTheReferenceAcrossPassesAndTakes) {
  const ModelTopology topology = small_topology();
  const Placement placement = replicated_placement(topology);
  CpuRouteRecorder recorder(topology, {.max_tokens_per_pass = 64, .capacity_tokens = 4096});
  recorder.set_placement(placement);
  const std::vector<std::int32_t> map(placement.physical_to_logical().begin(),
                                      placement.physical_to_logical().end());
  const auto passes = test::random_route_passes(topology, recorder.layout(), map, 40, 5, 7, true);
  const auto expected = test::expected_routes(passes, topology, recorder.layout(), map);
  const std::int64_t invalid_ids = test::expected_invalid_ids(passes, topology, recorder.layout());
  std::map<std::string, RoutedExperts> taken;
  for (std::size_t p = 0; p < passes.size(); ++p) {
    run_pass(recorder, passes[p]);
    if (p % 7 == 3) {  // incremental takes: only the new rows each time
      for (const std::string& request : recorder.requests()) {
        RoutedExperts more = recorder.take(request);
        auto [entry, is_new] = taken.try_emplace(request, more);
        if (!is_new) entry->second.append(more);
      }
    }
  }
  for (const auto& [request, rows] : expected) {
    RoutedExperts rest = recorder.finish(request);
    auto [entry, is_new] = taken.try_emplace(request, rest);
    if (!is_new) entry->second.append(rest);
    ASSERT_EQ(entry->second.num_tokens(), std::int64_t(rows.size())) << request;
    EXPECT_EQ(entry->second.first_position, 0);
    EXPECT_EQ(entry->second.placement_version, 3u);
    expect_matches(entry->second, rows);
  }
  const routes::RouteTallies tallies = recorder.tallies();
  EXPECT_EQ(tallies.passes, 40);
  EXPECT_GT(invalid_ids, 0);
  EXPECT_EQ(tallies.invalid_ids, invalid_ids);  // padding rows' bad ids not counted
  EXPECT_EQ(tallies.tokens_held, 0);
  EXPECT_TRUE(recorder.requests().empty());
}

TEST(RouteRecorder, TakeManyHandsOutWhatTakesInTurnWould) {
  const ModelTopology topology = small_topology();
  const Placement placement = replicated_placement(topology);
  const routes::RouteRecorderOptions options{.max_tokens_per_pass = 64, .capacity_tokens = 4096};
  CpuRouteRecorder one_by_one(topology, options);
  CpuRouteRecorder together(topology, options);
  one_by_one.set_placement(placement);
  together.set_placement(placement);
  const std::vector<std::int32_t> map(placement.physical_to_logical().begin(),
                                      placement.physical_to_logical().end());
  const auto passes =
      test::random_route_passes(topology, one_by_one.layout(), map, 20, 5, 11, true);
  for (std::size_t p = 0; p < passes.size(); ++p) {
    run_pass(one_by_one, passes[p]);
    run_pass(together, passes[p]);
    if (p % 5 != 4) continue;
    // Every request, one never seen, and one named twice: its second take holds nothing.
    std::vector<std::string> names = one_by_one.requests();
    ASSERT_FALSE(names.empty());
    names.push_back("never-seen");
    names.push_back(names.front());
    const bool finishing = p % 10 == 9;
    const std::vector<RoutedExperts> many =
        finishing ? together.finish_many(names) : together.take_many(names);
    ASSERT_EQ(many.size(), names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      const RoutedExperts single =
          finishing ? one_by_one.finish(names[i]) : one_by_one.take(names[i]);
      EXPECT_EQ(many[i].request_id, names[i]);
      EXPECT_EQ(many[i].first_position, single.first_position) << names[i];
      EXPECT_EQ(many[i].num_tokens(), single.num_tokens()) << names[i];
      EXPECT_EQ(many[i].ids.data, single.ids.data) << names[i];
      EXPECT_EQ(many[i].valid.data, single.valid.data) << names[i];
      EXPECT_EQ(many[i].placement_version, 3u);
    }
    EXPECT_EQ(together.requests(), one_by_one.requests());
    EXPECT_EQ(together.tallies().tokens_held, one_by_one.tallies().tokens_held);
  }
  EXPECT_TRUE(together.requests().empty());
  EXPECT_EQ(together.tallies().tokens_held, 0);
  EXPECT_TRUE(together.take_many({}).empty());
}

TEST(RouteRecorder, IdsAreTheNarrowestType) {
  for (auto [experts, dtype] :
       {std::pair{256, DType::kUInt8}, std::pair{257, DType::kUInt16},
        std::pair{65536, DType::kUInt16}, std::pair{65537, DType::kInt32}}) {
    CpuRouteRecorder recorder(ModelTopology::uniform(1, experts, 2),
                              {.max_tokens_per_pass = 4, .capacity_tokens = 4});
    EXPECT_EQ(recorder.layout().id_dtype(), dtype) << experts;
    const std::int32_t ids[] = {0, experts - 1};
    const std::int64_t shape[] = {1, 2};
    const TokenSpan batch[] = {{"r", 0, 1}};
    recorder.begin_pass();
    recorder.record_topk(0, TensorView::contiguous(ids, DType::kInt32, shape));
    recorder.end_pass(batch);
    const RoutedExperts routes = recorder.take("r");
    EXPECT_EQ(routes.id(0, 0, 1), experts - 1);
    EXPECT_EQ(recorder.capacity_bytes(), 4 * (2 * std::int64_t(dtype_size(dtype)) + 1));
    // int64 ids, column-major, with a third column after the top-k (a fused shared expert's,
    // here an id no row may hold): only the first two columns are read.
    const std::int64_t wide[] = {experts - 1, 1, 0, experts - 2, -5, -5};
    const std::int64_t wide_shape[] = {2, 3};
    const std::int64_t column_major[] = {1, 2};
    recorder.begin_pass();
    recorder.record_topk(0, TensorView(wide, DType::kInt64, wide_shape, column_major));
    const TokenSpan two[] = {{"r", 1, 2}};
    recorder.end_pass(two);
    const RoutedExperts next = recorder.take("r");
    ASSERT_EQ(next.num_tokens(), 2);
    EXPECT_EQ(next.id(0, 0, 0), experts - 1);
    EXPECT_EQ(next.id(0, 0, 1), 0);
    EXPECT_EQ(next.id(1, 0, 0), 1);
    EXPECT_EQ(next.id(1, 0, 1), experts - 2);
  }
}

struct OneLayer {
  CpuRouteRecorder recorder{ModelTopology::uniform(1, 4, 2),
                            {.max_tokens_per_pass = 8, .capacity_tokens = 3}};
  /// Begins a pass and records `ids` ([rows, 2]) for the layer.
  void open(const std::vector<std::int32_t>& ids) {
    recorder.begin_pass();
    const std::int64_t shape[] = {std::int64_t(ids.size() / 2), 2};
    recorder.record_topk(0, TensorView::contiguous(ids.data(), DType::kInt32, shape));
  }
  void pass(std::vector<TokenSpan> batch, const std::vector<std::int32_t>& ids) {
    open(ids);
    recorder.end_pass(batch);
  }
};

TEST(RouteRecorder, TokensBeyondCapacityComeBackNotValid) {
  OneLayer one;
  one.pass({{"a", 0, 2}, {"b", 0, 2}}, {0, 1, 1, 2, 2, 3, 3, 0});
  const RoutedExperts b = one.recorder.take("b");
  ASSERT_EQ(b.num_tokens(), 2);
  EXPECT_TRUE(b.is_valid(0, 0));
  EXPECT_FALSE(b.is_valid(1, 0));  // the fourth token: no fourth row
  EXPECT_EQ(one.recorder.tallies().tokens_without_room, 1);
  // Taking frees rows: the next pass fits again.
  one.recorder.take("a");
  one.pass({{"b", 2, 1}}, {1, 3});
  EXPECT_TRUE(one.recorder.take("b").complete());
}

TEST(RouteRecorder, GapsAndPositionsRoutedAgain) {
  OneLayer one;
  // Positions 0-1 from the prefix cache: no pass; 2-3 prefilled, then 3 routed again
  // (preempted and prefilled anew): the later route wins.
  one.pass({{"a", 2, 2}}, {0, 1, 1, 2});
  one.pass({{"a", 3, 1}}, {3, 0});
  RoutedExperts a = one.recorder.take("a");
  EXPECT_EQ(a.first_position, 2);
  ASSERT_EQ(a.num_tokens(), 2);
  EXPECT_EQ(a.id(1, 0, 0), 3);
  // Position 1 after positions 2-3 were taken: too late, tallied.
  one.pass({{"a", 1, 1}}, {1, 2});
  EXPECT_EQ(one.recorder.take("a").num_tokens(), 0);
  EXPECT_EQ(one.recorder.tallies().tokens_already_taken, 1);
  // A gap inside what is taken comes back not valid.
  one.pass({{"a", 6, 1}}, {1, 2});
  a = one.recorder.finish("a");
  EXPECT_EQ(a.first_position, 4);
  ASSERT_EQ(a.num_tokens(), 3);
  EXPECT_FALSE(a.is_valid(0, 0));
  EXPECT_FALSE(a.is_valid(1, 0));
  EXPECT_TRUE(a.is_valid(2, 0));
}

TEST(RouteRecorder, ALayerWrittenTwiceKeepsTheFirst) {
  OneLayer one;
  const TokenSpan batch[] = {{"a", 0, 1}};
  one.recorder.begin_pass();
  const std::int32_t target[] = {1, 2};
  const std::int32_t draft[] = {3, 0};
  const std::int64_t shape[] = {1, 2};
  one.recorder.record_topk(0, TensorView::contiguous(target, DType::kInt32, shape));
  one.recorder.record_topk(0, TensorView::contiguous(draft, DType::kInt32, shape));
  one.recorder.end_pass(batch);
  const RoutedExperts a = one.recorder.take("a");
  EXPECT_EQ(a.id(0, 0, 0), 1);
  EXPECT_EQ(one.recorder.tallies().layers_written_twice, 1);
}

TEST(RouteRecorder, AnAbortedPassLeavesItsTokensNotValid) {
  OneLayer one;
  one.pass({{"a", 0, 1}}, {0, 1});
  one.recorder.begin_pass();
  const std::int32_t ids[] = {2, 3};
  const std::int64_t shape[] = {1, 2};
  one.recorder.record_topk(0, TensorView::contiguous(ids, DType::kInt32, shape));
  one.recorder.abort_pass();
  // The next pass does not route that row: what the aborted pass wrote is not taken for it.
  one.recorder.begin_pass();
  const TokenSpan batch[] = {{"a", 1, 1}};
  one.recorder.end_pass(batch);
  const RoutedExperts a = one.recorder.take("a");
  ASSERT_EQ(a.num_tokens(), 2);
  EXPECT_TRUE(a.is_valid(0, 0));
  EXPECT_FALSE(a.is_valid(1, 0));
  EXPECT_EQ(one.recorder.tallies().tokens_held, 0);
}

TEST(RouteRecorder, RefusesWhatCannotBeAttributed) {
  OneLayer one;
  const std::int32_t ids[] = {0, 1, 2, 3};
  const std::int64_t shape[] = {2, 2};
  const auto view = TensorView::contiguous(ids, DType::kInt32, shape);
  EXPECT_MOESTAT_ERROR(one.recorder.record_topk(0, view), "outside a pass");
  EXPECT_MOESTAT_ERROR(one.recorder.end_pass({}), "end_pass without begin_pass");
  one.recorder.begin_pass();
  EXPECT_MOESTAT_ERROR(one.recorder.begin_pass(), "while a pass is open");
  EXPECT_MOESTAT_ERROR(one.recorder.record_topk(1, view), "not a MoE layer");
  const std::int64_t narrow[] = {4, 1};
  EXPECT_MOESTAT_ERROR(
      one.recorder.record_topk(0, TensorView::contiguous(ids, DType::kInt32, narrow)),
      "top_k is 2");
  const float floats[] = {0, 1};
  const std::int64_t one_row[] = {1, 2};
  EXPECT_MOESTAT_ERROR(
      one.recorder.record_topk(0, TensorView::contiguous(floats, DType::kFloat32, one_row)),
      "int32 or int64");
  const std::int32_t many_ids[18] = {};
  const std::int64_t many[] = {9, 2};
  EXPECT_MOESTAT_ERROR(
      one.recorder.record_topk(0, TensorView::contiguous(many_ids, DType::kInt32, many)),
      "more than max_tokens_per_pass");
  one.recorder.record_topk(0, view);
  const TokenSpan twice[] = {{"a", 0, 1}, {"a", 1, 1}};
  EXPECT_MOESTAT_ERROR(one.recorder.end_pass(twice), "appears twice");
  const TokenSpan overlapping[] = {{"a", 0, 2}, {"b", 0, 1, 1}};
  EXPECT_MOESTAT_ERROR(one.recorder.end_pass(overlapping), "batch row 1 is in two spans");
  const TokenSpan beyond[] = {{"a", 0, 2, 7}};
  EXPECT_MOESTAT_ERROR(one.recorder.end_pass(beyond), "pass max_tokens_per_pass");
  const TokenSpan negative[] = {{"a", -1, 1}};
  EXPECT_MOESTAT_ERROR(one.recorder.end_pass(negative), "from position -1");
  // Refused batches changed nothing; a good one still ends the pass.
  EXPECT_TRUE(one.recorder.requests().empty());
  const TokenSpan second_row[] = {{"a", 0, 1, 1}};
  one.recorder.end_pass(second_row);
  const RoutedExperts a = one.recorder.finish("a");
  EXPECT_EQ(a.id(0, 0, 0), 2);  // batch row 1
  EXPECT_EQ(one.recorder.take("never-seen").num_tokens(), 0);
  // A request the table knows, twice among new ones: named, and nothing changes.
  one.pass({{"b", 0, 1}}, {0, 1});
  one.recorder.begin_pass();
  const TokenSpan known_twice[] = {{"c", 0, 1}, {"b", 1, 1}, {"d", 0, 1}, {"b", 2, 1}};
  EXPECT_MOESTAT_ERROR(one.recorder.end_pass(known_twice), "request b appears twice");
  EXPECT_EQ(one.recorder.requests(), std::vector<std::string>{"b"});
  one.recorder.abort_pass();
}

TEST(RouteRecorder, ARefusedBatchChangesNothing) {
  OneLayer one;  // a 3-token store
  one.pass({{"done", 0, 1}}, {3, 0});
  one.recorder.finish("done");  // its row is free again, and still holds its ids
  one.open({1, 2, 2, 3});
  // The first span would get a row before the second is found wrong: nothing may be kept.
  const TokenSpan past_the_end[] = {{"a", 0, 1}, {"b", routes::kMaxPosition, 1}};
  EXPECT_MOESTAT_ERROR(one.recorder.end_pass(past_the_end), "end past the largest position");
  const TokenSpan overflowing[] = {{"a", 0, 1},
                                   {"b", std::numeric_limits<std::int64_t>::max() - 2, 6}};
  EXPECT_MOESTAT_ERROR(one.recorder.end_pass(overflowing), "end past the largest position");
  one.recorder.abort_pass();
  EXPECT_TRUE(one.recorder.requests().empty());
  EXPECT_EQ(one.recorder.take("a").num_tokens(), 0);
  EXPECT_EQ(one.recorder.tallies().tokens_recorded, 1);
  EXPECT_EQ(one.recorder.tallies().tokens_held, 0);
  // The last position a route may reach is kMaxPosition itself.
  one.pass({{"last", routes::kMaxPosition - 1, 1}}, {1, 2});
  const RoutedExperts last = one.recorder.finish("last");
  EXPECT_EQ(last.first_position, routes::kMaxPosition - 1);
  ASSERT_EQ(last.num_tokens(), 1);
  EXPECT_TRUE(last.complete());
}

TEST(RouteRecorder, OverflowingSpansHoldNoRows) {
  OneLayer one;  // a 3-token store
  for (const char* request : {"x", "y"}) {
    one.open({0, 1, 1, 2, 2, 3});
    const TokenSpan overflowing[] = {{request, std::numeric_limits<std::int64_t>::max() - 2, 3}};
    EXPECT_MOESTAT_ERROR(one.recorder.end_pass(overflowing), "end past the largest position");
    one.recorder.abort_pass();
  }
  EXPECT_EQ(one.recorder.tallies().tokens_held, 0);
  one.pass({{"a", 0, 3}}, {0, 1, 1, 2, 2, 3});
  EXPECT_TRUE(one.recorder.finish("a").complete());  // the whole store was still free
  EXPECT_EQ(one.recorder.tallies().tokens_without_room, 0);
}

TEST(RouteRecorder, GapsHoldNoRowsAndAreBoundedByTheCapacity) {
  CpuRouteRecorder recorder(ModelTopology::uniform(1, 4, 2),
                            {.max_tokens_per_pass = 2, .capacity_tokens = 16});
  const std::int32_t ids[] = {0, 1};
  const std::int64_t shape[] = {1, 2};
  const auto pass = [&](std::int64_t position) {
    recorder.begin_pass();
    recorder.record_topk(0, TensorView::contiguous(ids, DType::kInt32, shape));
    const TokenSpan batch[] = {{"a", position, 1}};
    recorder.end_pass(batch);
  };
  pass(0);
  // 3x10^8 positions on: a take() would hand out 3x10^8 rows no pass routed.
  EXPECT_MOESTAT_ERROR(pass(300'000'000),
                       "299999999 past the end of its routes, with 0 positions of gaps not yet "
                       "taken; at most capacity_tokens (16)");
  recorder.abort_pass();
  // 16 past the end: the most allowed; then one inside the gap, after a later position.
  pass(17);
  pass(5);
  EXPECT_EQ(recorder.tallies().tokens_held, 3);  // the gaps hold no rows
  const RoutedExperts a = recorder.take("a");
  EXPECT_EQ(a.first_position, 0);
  ASSERT_EQ(a.num_tokens(), 18);
  for (std::int64_t t = 0; t < 18; ++t) {
    EXPECT_EQ(a.is_valid(t, 0), t == 0 || t == 5 || t == 17) << t;
  }
  EXPECT_EQ(recorder.tallies().tokens_held, 0);
  // After a take() the bound counts from the end of what was taken.
  EXPECT_MOESTAT_ERROR(pass(18 + 17), "17 past the end of its routes");
  recorder.abort_pass();
  // Gaps add up between two takes: one-token spans 5 positions apart, each a small gap, may
  // not make a take hand out more than 16 positions no pass routed.
  pass(18 + 5);
  pass(18 + 5 + 6);
  pass(18 + 5 + 6 + 6);
  EXPECT_MOESTAT_ERROR(pass(18 + 5 + 6 + 6 + 6), "with 15 positions of gaps not yet taken");
  recorder.abort_pass();
  EXPECT_EQ(recorder.take("a").num_tokens(), 18);
  pass(36 + 5);  // the take handed the gaps out: room for more
}

/// A backend whose end of pass fails while `fail` is set (a device error, say), and otherwise
/// keeps nothing.
class FailingEndRecorder final : public routes::RouteRecorder {
 public:
  FailingEndRecorder()
      : RouteRecorder(ModelTopology::uniform(1, 4, 2),
                      {.max_tokens_per_pass = 4, .capacity_tokens = 4}) {}
  bool fail = true;

 private:
  void do_begin_pass() override {}
  void do_record(std::span<const ColumnIds>) override {}
  void do_end_pass(std::span<const RowMove>) override {
    MOESTAT_CHECK(!fail, "the device is lost");
  }
  void do_abort_pass() override {}
  void do_read_rows(std::span<const std::int32_t>, std::span<const ReadTarget>) override {}
  void do_set_placement(std::span<const std::int32_t>) override {}
  BackendTallies do_backend_tallies() const override { return {}; }
};

TEST(RouteRecorder, ABatchIsCommittedOnlyOnceTheBackendMovedItsRows) {
  FailingEndRecorder recorder;
  const TokenSpan batch[] = {{"a", 0, 2}};
  recorder.begin_pass();
  EXPECT_MOESTAT_ERROR(recorder.end_pass(batch), "the device is lost");
  EXPECT_TRUE(recorder.requests().empty());
  EXPECT_EQ(recorder.tallies().tokens_held, 0);
  EXPECT_EQ(recorder.tallies().tokens_recorded, 0);
  recorder.fail = false;
  recorder.end_pass(batch);  // the pass stayed open
  EXPECT_EQ(recorder.tallies().tokens_held, 2);
  EXPECT_EQ(recorder.take("a").num_tokens(), 2);
}

TEST(RouteRecorder, InvalidIdsAreTalliedForRoutedTokensOnly) {
  OneLayer one;
  // Row 0 is request a's, with an id outside [0, 4); rows 1 and 2 are padding, with an id
  // outside and a repeated one: not a routed token's, not counted.
  one.pass({{"a", 0, 1}}, {0, 9, 4, -1, 1, 1});
  EXPECT_EQ(one.recorder.tallies().invalid_ids, 1);
  EXPECT_FALSE(one.recorder.take("a").is_valid(0, 0));
  one.pass({{"b", 0, 1}}, {2, 2});  // one logical expert twice
  EXPECT_EQ(one.recorder.tallies().invalid_ids, 2);
}

TEST(RouteRecorder, SlotKeysReplaceASlotsRowAndReadInTheOrderAsked) {
  CpuRouteRecorder recorder(
      ModelTopology::uniform(1, 4, 2),
      {.max_tokens_per_pass = 4, .capacity_tokens = 8, .keys = routes::RouteKeys::kSlots});
  const std::int64_t shape[] = {3, 2};
  const std::int32_t first[] = {0, 1, 1, 2, 2, 3};
  recorder.begin_pass();
  recorder.record_topk(0, TensorView::contiguous(first, DType::kInt32, shape));
  const std::int64_t slots[] = {5, -1, 2};  // row 1 not recorded
  recorder.end_pass_slots(slots);
  const std::int32_t second[] = {3, 0, 0, 0, 0, 0};
  recorder.begin_pass();
  recorder.record_topk(0, TensorView::contiguous(second, DType::kInt32, shape));
  const std::int64_t again[] = {2};  // slot 2 routed again: its row is replaced
  recorder.end_pass_slots(again);
  const std::int64_t read[] = {2, 5, 7, -1};
  const RoutedExperts routes = recorder.read_slots(read, "r", 10);
  EXPECT_EQ(routes.first_position, 10);
  ASSERT_EQ(routes.num_tokens(), 4);
  EXPECT_EQ(routes.id(0, 0, 0), 3);
  EXPECT_EQ(routes.id(1, 0, 1), 1);
  EXPECT_FALSE(routes.is_valid(2, 0));  // never written
  EXPECT_FALSE(routes.is_valid(3, 0));
  EXPECT_EQ(recorder.tallies().tokens_held, 2);
  EXPECT_EQ(recorder.read_slots(read), recorder.read_slots(read));  // reads leave rows in place
  recorder.begin_pass();
  const std::int64_t twice[] = {1, 1};
  EXPECT_MOESTAT_ERROR(recorder.end_pass_slots(twice), "slot 1 twice");
  const std::int64_t outside[] = {8};
  EXPECT_MOESTAT_ERROR(recorder.end_pass_slots(outside), "slot 8 outside [0, 8)");
  EXPECT_MOESTAT_ERROR(recorder.end_pass({}), "needs request-position keys");
  EXPECT_MOESTAT_ERROR(recorder.take("r"), "needs request-position keys");
}

/// A slot-keyed recorder of one layer (4 experts, top-2) over 4 slots and 6 rows: room for
/// the slots and one pending pass of 2 tokens.
struct PendingSlotsRecorder {
  CpuRouteRecorder recorder{ModelTopology::uniform(1, 4, 2),
                            {.max_tokens_per_pass = 4,
                             .capacity_tokens = 6,
                             .keys = routes::RouteKeys::kSlots,
                             .num_slots = 4}};
  /// A pass whose batch row t routes to experts {ids[t], ids[t] + 1 mod 4}, ended pending.
  routes::PendingSlots pass(const std::vector<std::int32_t>& first_ids,
                            std::int64_t first_row = 0) {
    std::vector<std::int32_t> ids;
    for (std::int32_t id : first_ids) ids.insert(ids.end(), {id, (id + 1) % 4});
    const std::int64_t shape[] = {std::int64_t(first_ids.size()), 2};
    recorder.begin_pass();
    recorder.record_topk(0, TensorView::contiguous(ids.data(), DType::kInt32, shape));
    return recorder.end_pass_pending(first_row, std::int64_t(first_ids.size()) - first_row);
  }
  /// Each slot's first expert, -1 where it reads as not recorded.
  std::vector<std::int64_t> first_experts() {
    const std::int64_t slots[] = {0, 1, 2, 3};
    const RoutedExperts routes = recorder.read_slots(slots);
    std::vector<std::int64_t> out;
    for (std::int64_t t = 0; t < 4; ++t)
      out.push_back(routes.is_valid(t, 0) ? routes.id(t, 0, 0) : -1);
    return out;
  }
};

TEST(RouteRecorder, APendingPassGetsItsSlotsWhenCommitted) {
  PendingSlotsRecorder slots;
  // Batch row 0 is another rank's: the pass's tokens are rows 1-3.
  const routes::PendingSlots first = slots.pass({0, 1, 2, 3}, 1);
  EXPECT_EQ(first.num_tokens, 3);
  EXPECT_EQ(slots.first_experts(), (std::vector<std::int64_t>{-1, -1, -1, -1}));  // not yet
  const std::int64_t where[] = {2, 0, 3};
  const routes::SlotCommit committed = slots.recorder.commit_slots(first, where);
  EXPECT_EQ(committed.slots_out_of_range + committed.slots_repeated, 0);
  EXPECT_EQ(slots.first_experts(), (std::vector<std::int64_t>{2, -1, 1, 3}));
  EXPECT_EQ(slots.recorder.tallies().tokens_held, 3);
  EXPECT_MOESTAT_ERROR(slots.recorder.commit_slots(first, where), "committed or released already");
  EXPECT_FALSE(slots.recorder.release_pending(first));
}

TEST(RouteRecorder, CommittedSlotsReplaceTheirRowsAndFreeThem) {
  PendingSlotsRecorder slots;
  const std::int64_t three[] = {0, 1, 2};
  slots.recorder.commit_slots(slots.pass({1, 1, 1}), three);
  // Two passes in flight before either commits (an overlap scheduler): 3 rows held, 2 + 1
  // pending; the second pass's second token has no row.
  const routes::PendingSlots second = slots.pass({3, 0});
  const routes::PendingSlots third = slots.pass({2, 2});
  EXPECT_EQ(second.tokens_without_room, 0);
  EXPECT_EQ(third.tokens_without_room, 1);
  EXPECT_EQ(slots.recorder.tallies().tokens_pending, 3);
  // Slot 1 named twice: the later token holds it; slot 9 is outside.
  const std::int64_t second_slots[] = {1, 1};
  const routes::SlotCommit repeated = slots.recorder.commit_slots(second, second_slots);
  EXPECT_EQ(repeated.slots_repeated, 1);
  EXPECT_EQ(slots.first_experts(), (std::vector<std::int64_t>{1, 0, 1, -1}));
  // A token with no row makes its slot read as not recorded, never as the slot's old token.
  const std::int64_t third_slots[] = {9, 2};
  EXPECT_EQ(slots.recorder.commit_slots(third, third_slots).slots_out_of_range, 1);
  EXPECT_EQ(slots.first_experts(), (std::vector<std::int64_t>{1, 0, -1, -1}));
  EXPECT_EQ(slots.recorder.tallies().tokens_held, 2);
  EXPECT_EQ(slots.recorder.tallies().tokens_pending, 0);
  // Slots whose tokens' routes were lost read as not recorded; 7 is outside.
  const std::int64_t lost[] = {1, 7, 2};
  EXPECT_EQ(slots.recorder.clear_slots(lost), 1);
  EXPECT_EQ(slots.first_experts(), (std::vector<std::int64_t>{1, -1, -1, -1}));
  EXPECT_EQ(slots.recorder.tallies().tokens_held, 1);
  // Every freed row is free again: a pass of 4 tokens finds 4 rows.
  const routes::PendingSlots all = slots.pass({0, 1, 2, 3});
  EXPECT_EQ(all.tokens_without_room, 0);
  EXPECT_TRUE(slots.recorder.release_pending(all));  // a dropped forward gives them back
  EXPECT_EQ(slots.pass({0, 1, 2, 3}).tokens_without_room, 0);
}

TEST(RouteRecorder, PendingPassesAreRefusedWhatTheyCannotHold) {
  PendingSlotsRecorder slots;
  const routes::PendingSlots pending = slots.pass({0, 1});
  const std::int64_t one[] = {0};
  EXPECT_MOESTAT_ERROR(slots.recorder.commit_slots(pending, one),
                       "1 slots for pending pass 1's 2 tokens");
  slots.recorder.begin_pass();
  EXPECT_MOESTAT_ERROR(slots.recorder.end_pass_pending(2, 3),
                       "batch rows [2, 5) pass max_tokens_per_pass (4)");
  for (std::int64_t i = 1; i < routes::kMaxPendingPasses; ++i) {
    slots.recorder.end_pass_pending(0, 0);
    slots.recorder.begin_pass();
  }
  EXPECT_MOESTAT_ERROR(slots.recorder.end_pass_pending(0, 0),
                       "1024 passes wait for commit_slots() or release_pending()");
  CpuRouteRecorder requests(ModelTopology::uniform(1, 4, 2), {});
  requests.begin_pass();
  EXPECT_MOESTAT_ERROR(requests.end_pass_pending(0, 1), "end_pass_pending needs slot keys");
  EXPECT_MOESTAT_ERROR(
      CpuRouteRecorder(ModelTopology::uniform(1, 4, 2),
                       {.capacity_tokens = 4, .keys = routes::RouteKeys::kSlots, .num_slots = 5}),
      "num_slots 5 outside [0, capacity_tokens (4)]");
}

TEST(RouteRecorder, TakesFromAnotherThreadWhilePassesRun) {
  const ModelTopology topology = small_topology();
  CpuRouteRecorder recorder(topology, {.max_tokens_per_pass = 64, .capacity_tokens = 4096});
  const std::vector<std::int32_t> map = test::identity_map(topology);
  const auto passes =
      test::random_route_passes(topology, recorder.layout(), map, 300, 4, 11, false);
  const auto expected = test::expected_routes(passes, topology, recorder.layout(), map);
  std::atomic<bool> done = false;
  std::map<std::string, RoutedExperts> taken;
  std::thread control([&] {
    while (!done.load()) {
      for (int r = 0; r < 4; ++r) {
        const std::string request = "request-" + std::to_string(r);
        RoutedExperts more = recorder.take(request);
        if (more.num_tokens() == 0) continue;
        auto [entry, is_new] = taken.try_emplace(request, more);
        if (!is_new) entry->second.append(more);
      }
    }
  });
  for (const auto& pass : passes) run_pass(recorder, pass);
  done = true;
  control.join();
  for (const auto& [request, rows] : expected) {
    RoutedExperts rest = recorder.finish(request);
    auto [entry, is_new] = taken.try_emplace(request, rest);
    if (!is_new) entry->second.append(rest);
    ASSERT_EQ(entry->second.num_tokens(), std::int64_t(rows.size())) << request;
    expect_matches(entry->second, rows);
  }
  EXPECT_EQ(recorder.tallies().tokens_without_room, 0);
}

}  // namespace
}  // namespace moestat
