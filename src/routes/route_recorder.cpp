// RouteRecorder: the checks every backend shares and the host's table of which store row
// holds which request's position.
#include <algorithm>
#include <moestat/error.hpp>
#include <moestat/routes/route_recorder.hpp>
#include <numeric>

namespace moestat::routes {

RouteRecorder::RouteRecorder(ModelTopology topology, RouteRecorderOptions options)
    : topology_(std::move(topology)), layout_(RouteLayout::of(topology_)), options_(options) {
  MOESTAT_CHECK(options_.max_tokens_per_pass >= 1 && options_.max_tokens_per_pass <= (1 << 30),
                "route recorder: max_tokens_per_pass {} outside [1, 2^30]",
                options_.max_tokens_per_pass);
  MOESTAT_CHECK(options_.capacity_tokens >= 1 && options_.capacity_tokens <= (1 << 30),
                "route recorder: capacity_tokens {} outside [1, 2^30]", options_.capacity_tokens);
  if (options_.keys == RouteKeys::kSlots) {
    slot_written_.assign(std::size_t(options_.capacity_tokens), false);
    return;
  }
  free_rows_.resize(std::size_t(options_.capacity_tokens));
  // Lowest rows are handed out first (from the back), which keeps a small recording compact.
  std::iota(free_rows_.rbegin(), free_rows_.rend(), 0);
}

void RouteRecorder::require_keys(RouteKeys keys, const char* call) const {
  MOESTAT_CHECK(options_.keys == keys, "route recorder: {} needs {} keys; this recorder keys {}",
                call, keys == RouteKeys::kSlots ? "slot" : "request-position",
                options_.keys == RouteKeys::kSlots ? "slots" : "requests and positions");
}

std::int64_t RouteRecorder::capacity_bytes() const noexcept {
  return options_.capacity_tokens * layout_.bytes_per_token();
}

void RouteRecorder::begin_pass() {
  check_pass_control("begin_pass");
  std::lock_guard lock(mutex_);
  MOESTAT_CHECK(!pass_open_, "route recorder: begin_pass while a pass is open");
  do_begin_pass();
  pass_open_ = true;
}

std::vector<RouteRecorder::RowMove> RouteRecorder::assign_rows(std::span<const TokenSpan> batch) {
  // Checked whole before any row is given, so a refused batch changes nothing.
  std::vector<bool> covered(std::size_t(options_.max_tokens_per_pass), false);
  std::int64_t next_row = 0;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const TokenSpan& span = batch[i];
    MOESTAT_CHECK(span.num_tokens >= 0 && span.first_position >= 0,
                  "route recorder: request {} spans {} tokens from position {}", span.request_id,
                  span.num_tokens, span.first_position);
    const std::int64_t first = span.first_row == TokenSpan::kFollows ? next_row : span.first_row;
    MOESTAT_CHECK(first >= 0 && span.num_tokens <= options_.max_tokens_per_pass - first,
                  "route recorder: request {}'s rows [{}, {}) pass max_tokens_per_pass ({})",
                  span.request_id, first, first + span.num_tokens, options_.max_tokens_per_pass);
    for (std::int64_t row = first; row < first + span.num_tokens; ++row) {
      MOESTAT_CHECK(!covered[std::size_t(row)], "route recorder: batch row {} is in two spans",
                    row);
      covered[std::size_t(row)] = true;
    }
    for (std::size_t j = 0; j < i; ++j) {
      MOESTAT_CHECK(span.request_id != batch[j].request_id,
                    "route recorder: request {} appears twice in one batch", span.request_id);
    }
    next_row = first + span.num_tokens;
  }
  std::vector<RowMove> moves;
  next_row = 0;
  for (const TokenSpan& span : batch) {
    const auto [entry, is_new] = requests_.try_emplace(span.request_id);
    RequestRows& request = entry->second;
    if (is_new) {
      request.first_position = span.first_position;
      request.end = span.first_position;
    }
    const std::int64_t first = span.first_row == TokenSpan::kFollows ? next_row : span.first_row;
    for (std::int64_t i = 0; i < span.num_tokens; ++i) {
      const std::int32_t row = assign_row(request, span.first_position + i);
      if (row >= 0) moves.push_back({std::int32_t(first + i), row});
    }
    request.end = std::max(request.end, span.first_position + span.num_tokens);
    next_row = first + span.num_tokens;
  }
  return moves;
}

std::int32_t RouteRecorder::assign_row(RequestRows& request, std::int64_t position) {
  if (position < request.first_position) {
    // Handed out by an earlier take(): the trainer has it already.
    ++tallies_.tokens_already_taken;
    return -1;
  }
  const auto index = std::size_t(position - request.first_position);
  if (index >= request.rows.size()) request.rows.resize(index + 1, -1);
  // A position routed again (a request preempted and prefilled anew) gets a fresh row.
  if (request.rows[index] >= 0) release(request.rows[index]);
  request.rows[index] = -1;
  if (free_rows_.empty()) {
    ++tallies_.tokens_without_room;
    return -1;
  }
  request.rows[index] = free_rows_.back();
  free_rows_.pop_back();
  ++tallies_.tokens_recorded;
  return request.rows[index];
}

void RouteRecorder::release(std::int32_t row) { free_rows_.push_back(row); }

void RouteRecorder::check_layer(std::int64_t layer, const TensorView& topk_ids) const {
  MOESTAT_CHECK(layout_.column_of(layer) >= 0,
                "route recorder: layer {} is not a MoE layer of the model ({} decoder layers)",
                layer, layout_.num_decoder_layers);
  MOESTAT_CHECK(topk_ids.dim() == 2, "route recorder: layer {}: top-k ids must be 2-d, got {}-d",
                layer, topk_ids.dim());
  MOESTAT_CHECK(topk_ids.dtype() == DType::kInt32 || topk_ids.dtype() == DType::kInt64,
                "route recorder: layer {}: top-k ids must be int32 or int64, got {}", layer,
                dtype_name(topk_ids.dtype()));
  MOESTAT_CHECK(topk_ids.size(1) >= layout_.top_k,
                "route recorder: layer {}: {} id columns, top_k is {}", layer, topk_ids.size(1),
                layout_.top_k);
  MOESTAT_CHECK(topk_ids.size(0) <= options_.max_tokens_per_pass,
                "route recorder: layer {}: {} rows, more than max_tokens_per_pass ({})", layer,
                topk_ids.size(0), options_.max_tokens_per_pass);
}

void RouteRecorder::record_topk(std::int64_t layer, const TensorView& topk_ids) {
  const LayerTopk one{layer, topk_ids};
  record_topk_layers({&one, 1});
}

void RouteRecorder::record_topk_layers(std::span<const LayerTopk> layers) {
  // NOTE: pass_open_ is written by the forward thread only (begin/end/abort_pass), so the
  // hook reads it without the lock the control calls take.
  MOESTAT_CHECK(pass_open_ || accepts_hooks_outside_pass(),
                "route recorder: a layer hook outside a pass (call begin_pass first)");
  std::vector<ColumnIds> columns;
  columns.reserve(layers.size());
  for (const LayerTopk& layer : layers) {
    check_layer(layer.layer, layer.topk_ids);
    const std::int64_t shape[] = {layer.topk_ids.size(0), layout_.top_k};
    const std::int64_t strides[] = {layer.topk_ids.stride(0), layer.topk_ids.stride(1)};
    columns.push_back(
        {layout_.column_of(layer.layer), TensorView(layer.topk_ids.data(), layer.topk_ids.dtype(),
                                                    shape, strides, layer.topk_ids.device())});
  }
  if (!columns.empty()) do_record(columns);
}

void RouteRecorder::end_pass(std::span<const TokenSpan> batch) {
  require_keys(RouteKeys::kRequestPositions, "end_pass(batch)");
  check_pass_control("end_pass");
  std::lock_guard lock(mutex_);
  MOESTAT_CHECK(pass_open_, "route recorder: end_pass without begin_pass");
  const std::vector<RowMove> moves = assign_rows(batch);
  do_end_pass(moves);
  pass_open_ = false;
  ++tallies_.passes;
}

void RouteRecorder::end_pass_slots(std::span<const std::int64_t> slots) {
  require_keys(RouteKeys::kSlots, "end_pass_slots");
  check_pass_control("end_pass");
  MOESTAT_CHECK(std::int64_t(slots.size()) <= options_.max_tokens_per_pass,
                "route recorder: {} slots, more than max_tokens_per_pass ({})", slots.size(),
                options_.max_tokens_per_pass);
  std::lock_guard lock(mutex_);
  MOESTAT_CHECK(pass_open_, "route recorder: end_pass without begin_pass");
  std::vector<RowMove> moves;
  std::vector<bool> seen(std::size_t(options_.capacity_tokens), false);
  for (std::size_t row = 0; row < slots.size(); ++row) {
    const std::int64_t slot = slots[row];
    if (slot == -1) continue;
    MOESTAT_CHECK(slot >= 0 && slot < options_.capacity_tokens,
                  "route recorder: batch row {}'s slot {} outside [0, {})", row, slot,
                  options_.capacity_tokens);
    MOESTAT_CHECK(!seen[std::size_t(slot)], "route recorder: slot {} twice in one pass", slot);
    seen[std::size_t(slot)] = true;
    moves.push_back({std::int32_t(row), std::int32_t(slot)});
  }
  do_end_pass(moves);
  for (const RowMove& move : moves) {
    if (!slot_written_[std::size_t(move.store_row)]) ++slots_written_;
    slot_written_[std::size_t(move.store_row)] = true;
  }
  tallies_.tokens_recorded += std::int64_t(moves.size());
  pass_open_ = false;
  ++tallies_.passes;
}

RoutedExperts RouteRecorder::read_slots(std::span<const std::int64_t> slots, std::string request_id,
                                        std::int64_t first_position) {
  require_keys(RouteKeys::kSlots, "read_slots");
  std::vector<std::int32_t> rows;
  rows.reserve(slots.size());
  std::uint64_t placement_version = 0;
  std::string model;
  {
    std::lock_guard lock(mutex_);
    for (std::int64_t slot : slots) {
      MOESTAT_CHECK(slot >= -1 && slot < options_.capacity_tokens,
                    "route recorder: slot {} outside [0, {})", slot, options_.capacity_tokens);
      rows.push_back(slot >= 0 && slot_written_[std::size_t(slot)] ? std::int32_t(slot) : -1);
    }
    placement_version = placement_version_;
    model = model_;
  }
  RoutedExperts routes = RoutedExperts::unrecorded(layout_, std::move(request_id), first_position,
                                                   std::int64_t(rows.size()));
  routes.model = std::move(model);
  routes.placement_version = placement_version;
  if (!rows.empty()) do_read_rows(rows, routes.ids.data.data(), routes.valid.data.data());
  return routes;
}

void RouteRecorder::abort_pass() {
  check_pass_control("abort_pass");
  std::lock_guard lock(mutex_);
  MOESTAT_CHECK(pass_open_, "route recorder: abort_pass without begin_pass");
  do_abort_pass();
  pass_open_ = false;
}

RoutedExperts RouteRecorder::take(std::string_view request_id) {
  require_keys(RouteKeys::kRequestPositions, "take");
  return take_locked_then_read(request_id, false);
}

RoutedExperts RouteRecorder::finish(std::string_view request_id) {
  require_keys(RouteKeys::kRequestPositions, "finish");
  return take_locked_then_read(request_id, true);
}

RoutedExperts RouteRecorder::take_locked_then_read(std::string_view request_id, bool forget) {
  std::vector<std::int32_t> rows;
  std::int64_t first_position = 0;
  std::uint64_t placement_version = 0;
  std::string model;
  {
    std::lock_guard lock(mutex_);
    const auto found = requests_.find(request_id);
    if (found == requests_.end()) {
      return RoutedExperts::unrecorded(layout_, std::string(request_id), 0, 0);
    }
    RequestRows& request = found->second;
    const std::int64_t end = request.end;
    first_position = request.first_position;
    const auto count = std::size_t(std::max<std::int64_t>(0, end - first_position));
    rows.assign(request.rows.begin(),
                request.rows.begin() + std::ptrdiff_t(std::min(count, request.rows.size())));
    rows.resize(count, -1);
    request.rows.erase(request.rows.begin(),
                       request.rows.begin() + std::ptrdiff_t(std::min(count, request.rows.size())));
    request.first_position += std::int64_t(count);
    if (forget) requests_.erase(found);
    placement_version = placement_version_;
    model = model_;
  }
  RoutedExperts routes = RoutedExperts::unrecorded(layout_, std::string(request_id), first_position,
                                                   std::int64_t(rows.size()));
  routes.model = std::move(model);
  routes.placement_version = placement_version;
  if (!rows.empty()) {
    // The rows were removed from the table above, so no pass can be given them before they
    // are read; they become free only once read.
    try {
      do_read_rows(rows, routes.ids.data.data(), routes.valid.data.data());
    } catch (...) {
      std::lock_guard lock(mutex_);
      for (std::int32_t row : rows) {
        if (row >= 0) release(row);
      }
      throw;
    }
    std::lock_guard lock(mutex_);
    for (std::int32_t row : rows) {
      if (row >= 0) release(row);
    }
  }
  return routes;
}

void RouteRecorder::set_placement(const Placement& placement) {
  MOESTAT_CHECK(placement.num_layers() == topology_.num_layers &&
                    placement.num_physical_experts() == topology_.num_physical_experts &&
                    placement.num_logical_experts() == topology_.num_logical_experts,
                "route recorder: a placement of {} layers x {} slots ({} experts) does not fit "
                "the model ({} x {}, {})",
                placement.num_layers(), placement.num_physical_experts(),
                placement.num_logical_experts(), topology_.num_layers,
                topology_.num_physical_experts, topology_.num_logical_experts);
  const std::int64_t num_physical = topology_.num_physical_experts;
  std::vector<std::int32_t> columns;
  columns.reserve(std::size_t(layout_.num_columns() * num_physical));
  for (std::int64_t layer : layout_.layers) {
    const auto row = placement.physical_to_logical().subspan(std::size_t(layer * num_physical),
                                                             std::size_t(num_physical));
    columns.insert(columns.end(), row.begin(), row.end());
  }
  std::lock_guard lock(mutex_);
  do_set_placement(columns);
  placement_version_ = placement.version();
}

void RouteRecorder::set_model(std::string model) {
  std::lock_guard lock(mutex_);
  model_ = std::move(model);
}

std::vector<std::string> RouteRecorder::requests() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> names;
  for (const auto& [name, request] : requests_) names.push_back(name);
  return names;
}

RouteTallies RouteRecorder::tallies() const {
  std::lock_guard lock(mutex_);
  RouteTallies out = tallies_;
  const BackendTallies backend = do_backend_tallies();
  out.invalid_ids = backend.invalid_ids;
  out.layers_written_twice = backend.layers_written_twice;
  out.tokens_held = options_.keys == RouteKeys::kSlots
                        ? slots_written_
                        : options_.capacity_tokens - std::int64_t(free_rows_.size());
  return out;
}

}  // namespace moestat::routes
