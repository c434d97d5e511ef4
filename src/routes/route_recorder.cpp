// RouteRecorder: the checks every backend shares and the host's table of which store row
// holds which request's position.
#include <algorithm>
#include <cstring>
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
    MOESTAT_CHECK(options_.num_slots >= 0 && options_.num_slots <= options_.capacity_tokens,
                  "route recorder: num_slots {} outside [0, capacity_tokens ({})]",
                  options_.num_slots, options_.capacity_tokens);
    slot_rows_.assign(std::size_t(num_slots()), -1);
    slot_marks_.assign(std::size_t(num_slots()), 0);
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

std::int64_t RouteRecorder::num_slots() const noexcept {
  return options_.num_slots > 0 ? options_.num_slots : options_.capacity_tokens;
}

std::int64_t RouteRecorder::capacity_bytes() const noexcept {
  return options_.capacity_tokens * layout_.bytes_per_token();
}

void RouteRecorder::begin_pass() {
  check_pass_control("begin_pass");
  std::unique_lock pass(pass_mutex_);
  std::lock_guard lock(mutex_);
  MOESTAT_CHECK(!pass_open_, "route recorder: begin_pass while a pass is open");
  do_begin_pass();
  pass_open_ = true;
}

struct RouteRecorder::PassPlan {
  /// A request the batch already knew: the rows it gains (rows[first, first + count)) and
  /// where its routes then end.
  struct Grown {
    RequestRows* request;  // its rows have room reserved for the new ones
    std::size_t first;
    std::size_t count;
    std::int64_t end;
    std::int64_t gap_positions;
  };
  std::vector<RowMove> moves;
  std::size_t rows_used = 0;  // from the back of free_rows_
  std::vector<HeldRow> rows;  // every grown request's new rows, one after another
  std::vector<Grown> grown;
  RequestTable new_requests;
  std::int64_t tokens_recorded = 0;
  std::int64_t tokens_without_room = 0;
  std::int64_t tokens_already_taken = 0;
};

std::vector<RouteRecorder::RequestRows*> RouteRecorder::check_batch(
    std::span<const TokenSpan> batch) {
  std::vector<RequestRows*> known(batch.size(), nullptr);
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
    // Written as a difference: first_position + num_tokens may not fit in 64 bits.
    MOESTAT_CHECK(span.first_position <= kMaxPosition - span.num_tokens,
                  "route recorder: request {}'s {} tokens from position {} end past the largest "
                  "position, 2^62",
                  span.request_id, span.num_tokens, span.first_position);
    for (std::int64_t row = first; row < first + span.num_tokens; ++row) {
      MOESTAT_CHECK(!covered[std::size_t(row)], "route recorder: batch row {} is in two spans",
                    row);
      covered[std::size_t(row)] = true;
    }
    // A take() hands gaps out as rows not valid: bounding the gaps a request holds between
    // two takes bounds what one take() can be made to allocate for positions no pass routed
    // to a full store's worth, whatever the positions.
    const auto found = requests_.find(span.request_id);
    if (found != requests_.end()) {
      const RequestRows& request = found->second;
      MOESTAT_CHECK(gap_before(request, span) <= options_.capacity_tokens - request.gap_positions,
                    "route recorder: request {}'s span starts at position {}, {} past the end of "
                    "its routes, with {} positions of gaps not yet taken; at most "
                    "capacity_tokens ({}) positions of gaps are held between two takes",
                    span.request_id, span.first_position, gap_before(request, span),
                    request.gap_positions, options_.capacity_tokens);
      known[i] = &found->second;
    }
    next_row = first + span.num_tokens;
  }
  if (batch.size() > 1) check_no_request_twice(batch, known);
  return known;
}

void RouteRecorder::check_no_request_twice(std::span<const TokenSpan> batch,
                                           std::span<RequestRows* const> known) {
  // The same entry of the table twice, or a new name twice. Sorted, not compared pairwise (a
  // 256-request decode batch is 32640 pairs); a decode batch's requests are all known, so it
  // sorts pointers, not names.
  std::vector<const RequestRows*> entries;
  std::vector<std::string_view> new_names;
  entries.reserve(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (known[i]) {
      entries.push_back(known[i]);
    } else {
      new_names.push_back(batch[i].request_id);
    }
  }
  std::sort(entries.begin(), entries.end());
  const auto same_entry = std::adjacent_find(entries.begin(), entries.end());
  if (same_entry != entries.end()) {
    const auto named = std::find_if(batch.begin(), batch.end(), [&](const TokenSpan& span) {
      return known[std::size_t(&span - batch.data())] == *same_entry;
    });
    MOESTAT_FAIL("route recorder: request {} appears twice in one batch", named->request_id);
  }
  std::sort(new_names.begin(), new_names.end());
  const auto same_name = std::adjacent_find(new_names.begin(), new_names.end());
  MOESTAT_CHECK(same_name == new_names.end(),
                "route recorder: request {} appears twice in one batch", *same_name);
}

RouteRecorder::PassPlan RouteRecorder::plan_rows(std::span<const TokenSpan> batch,
                                                 std::span<RequestRows* const> known) {
  PassPlan plan;
  plan.grown.reserve(batch.size());
  std::int64_t next_row = 0;
  for (std::size_t s = 0; s < batch.size(); ++s) {
    const TokenSpan& span = batch[s];
    RequestRows* request = known[s];
    const std::size_t first_held = plan.rows.size();  // the span's new rows, by position
    std::vector<HeldRow> new_request_rows;
    std::vector<HeldRow>& rows = request ? plan.rows : new_request_rows;
    const std::int64_t not_taken = request ? request->first_position : span.first_position;
    const std::int64_t first = span.first_row == TokenSpan::kFollows ? next_row : span.first_row;
    for (std::int64_t i = 0; i < span.num_tokens; ++i) {
      const std::int64_t position = span.first_position + i;
      const auto batch_row = std::int32_t(first + i);
      if (position < not_taken) {
        // Handed out by an earlier take(): the trainer has it already.
        ++plan.tokens_already_taken;
        continue;
      }
      // A position routed again (a request preempted and prefilled anew) keeps its row, which
      // this pass overwrites.
      const std::int32_t held = request ? held_row(*request, position) : -1;
      if (held >= 0) {
        plan.moves.push_back({batch_row, held});
      } else if (plan.rows_used < free_rows_.size()) {
        const std::int32_t row = free_rows_[free_rows_.size() - 1 - plan.rows_used++];
        rows.push_back({position, row});
        plan.moves.push_back({batch_row, row});
      } else {
        ++plan.tokens_without_room;
        continue;
      }
      ++plan.tokens_recorded;
    }
    const std::int64_t end = span.first_position + span.num_tokens;
    if (request) {
      // Reserved now, so commit() does not allocate; doubled, so appends stay amortised O(1).
      const std::size_t added = plan.rows.size() - first_held;
      const std::size_t needed = request->rows.size() + added;
      if (needed > request->rows.capacity()) {
        request->rows.reserve(std::max(needed, 2 * request->rows.capacity()));
      }
      plan.grown.push_back({request, first_held, added, std::max(request->end, end),
                            request->gap_positions + gap_before(*request, span)});
    } else {
      plan.new_requests.emplace(span.request_id,
                                RequestRows{span.first_position, std::move(new_request_rows), end});
    }
    next_row = first + span.num_tokens;
  }
  // So that commit() moves the new requests' nodes in without growing the table's buckets.
  requests_.reserve(requests_.size() + plan.new_requests.size());
  return plan;
}

std::int64_t RouteRecorder::gap_before(const RequestRows& request, const TokenSpan& span) noexcept {
  return std::max<std::int64_t>(0, span.first_position - request.end);
}

std::int32_t RouteRecorder::held_row(const RequestRows& request, std::int64_t position) {
  const auto found =
      std::lower_bound(request.rows.begin(), request.rows.end(), position,
                       [](const HeldRow& held, std::int64_t p) { return held.position < p; });
  return found == request.rows.end() || found->position != position ? -1 : found->row;
}

void RouteRecorder::commit(PassPlan& plan) noexcept {
  // Nothing here throws (room reserved by plan_rows, new requests' nodes spliced into buckets
  // plan_rows reserved, a merge that falls back to no buffer rather than fail), so the table
  // never holds half a pass.
  free_rows_.resize(free_rows_.size() - plan.rows_used);
  const auto by_position = [](const HeldRow& a, const HeldRow& b) {
    return a.position < b.position;
  };
  for (const PassPlan::Grown& grown : plan.grown) {
    std::vector<HeldRow>& rows = grown.request->rows;
    const auto old_size = std::ptrdiff_t(rows.size());
    const auto added = plan.rows.begin() + std::ptrdiff_t(grown.first);
    rows.insert(rows.end(), added, added + std::ptrdiff_t(grown.count));
    // Sorted already when the span follows what the request holds: the common case, which
    // then costs no merge.
    if (old_size > 0 && grown.count > 0 &&
        added->position < rows[std::size_t(old_size - 1)].position) {
      std::inplace_merge(rows.begin(), rows.begin() + old_size, rows.end(), by_position);
    }
    grown.request->end = grown.end;
    grown.request->gap_positions = grown.gap_positions;
  }
  requests_.merge(plan.new_requests);
  tallies_.tokens_recorded += plan.tokens_recorded;
  tallies_.tokens_without_room += plan.tokens_without_room;
  tallies_.tokens_already_taken += plan.tokens_already_taken;
}

void RouteRecorder::release(std::int32_t row) { free_rows_.push_back(row); }

void RouteRecorder::copy_to_targets(std::span<const ReadTarget> targets, std::size_t first,
                                    std::size_t count, const std::byte* ids,
                                    const std::byte* valid) const noexcept {
  const auto columns = std::size_t(layout_.num_columns());
  const std::size_t row_bytes =
      columns * std::size_t(layout_.top_k) * dtype_size(layout_.id_dtype());
  // The first target ending past `first`: targets are few (one per request), so a search
  // per chunk costs nothing beside the copy.
  auto target = std::upper_bound(
      targets.begin(), targets.end(), first,
      [](std::size_t row, const ReadTarget& t) { return row < t.first + t.count; });
  for (; target != targets.end() && target->first < first + count; ++target) {
    const std::size_t from = std::max(first, target->first);
    const std::size_t to = std::min(first + count, target->first + target->count);
    std::memcpy(target->ids + (from - target->first) * row_bytes, ids + (from - first) * row_bytes,
                (to - from) * row_bytes);
    std::memcpy(target->valid + (from - target->first) * columns, valid + (from - first) * columns,
                (to - from) * columns);
  }
}

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
  // Shared: hooks of several threads run together, but never while a pass opens or ends (the
  // CPU backend's begin_pass installs the placement the hooks map through).
  std::shared_lock pass(pass_mutex_);
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
  std::unique_lock pass(pass_mutex_);
  std::lock_guard lock(mutex_);
  MOESTAT_CHECK(pass_open_, "route recorder: end_pass without begin_pass");
  // Checked whole and planned before anything changes; committed only once the backend has
  // moved the rows, so a refused batch or a failed move leaves the table as it was.
  const std::vector<RequestRows*> known = check_batch(batch);
  PassPlan plan = plan_rows(batch, known);
  do_end_pass(plan.moves);
  commit(plan);
  pass_open_ = false;
  ++tallies_.passes;
}

void RouteRecorder::end_pass_slots(std::span<const std::int64_t> slots) {
  require_keys(RouteKeys::kSlots, "end_pass_slots");
  check_pass_control("end_pass");
  MOESTAT_CHECK(std::int64_t(slots.size()) <= options_.max_tokens_per_pass,
                "route recorder: {} slots, more than max_tokens_per_pass ({})", slots.size(),
                options_.max_tokens_per_pass);
  std::unique_lock pass(pass_mutex_);
  std::lock_guard lock(mutex_);
  MOESTAT_CHECK(pass_open_, "route recorder: end_pass without begin_pass");
  std::vector<RowMove> moves;
  std::vector<std::int64_t> given;  // the slot of each move
  std::size_t rows_used = 0;        // from the back of free_rows_
  std::int64_t without_room = 0;
  begin_slot_marks();
  for (std::size_t row = 0; row < slots.size(); ++row) {
    const std::int64_t slot = slots[row];
    if (slot == -1) continue;
    MOESTAT_CHECK(slot >= 0 && slot < num_slots(),
                  "route recorder: batch row {}'s slot {} outside [0, {})", row, slot, num_slots());
    MOESTAT_CHECK(mark_slot(slot), "route recorder: slot {} twice in one pass", slot);
    // A slot written again keeps its row, which the pass overwrites.
    std::int32_t store_row = slot_rows_[std::size_t(slot)];
    if (store_row < 0) {
      if (rows_used == free_rows_.size()) {
        ++without_room;
        continue;
      }
      store_row = free_rows_[free_rows_.size() - 1 - rows_used++];
    }
    moves.push_back({std::int32_t(row), store_row});
    given.push_back(slot);
  }
  do_end_pass(moves);
  free_rows_.resize(free_rows_.size() - rows_used);
  for (std::size_t i = 0; i < moves.size(); ++i) {
    std::int32_t& held = slot_rows_[std::size_t(given[i])];
    if (held < 0) ++slots_written_;
    held = moves[i].store_row;
  }
  tallies_.tokens_recorded += std::int64_t(moves.size());
  tallies_.tokens_without_room += without_room;
  pass_open_ = false;
  ++tallies_.passes;
}

PendingSlots RouteRecorder::end_pass_pending(std::int64_t first_row, std::int64_t num_tokens) {
  require_keys(RouteKeys::kSlots, "end_pass_pending");
  check_pass_control("end_pass");
  MOESTAT_CHECK(
      first_row >= 0 && num_tokens >= 0 && num_tokens <= options_.max_tokens_per_pass - first_row,
      "route recorder: batch rows [{}, {}) pass max_tokens_per_pass ({})", first_row,
      first_row + num_tokens, options_.max_tokens_per_pass);
  std::unique_lock pass(pass_mutex_);
  std::lock_guard lock(mutex_);
  MOESTAT_CHECK(pass_open_, "route recorder: end_pass without begin_pass");
  // Bounds what an engine that never commits can make the table hold.
  MOESTAT_CHECK(pending_.size() < std::size_t(kMaxPendingPasses),
                "route recorder: {} passes wait for commit_slots() or release_pending(); commit "
                "or release them first",
                pending_.size());
  const auto given =
      std::size_t(std::min<std::int64_t>(num_tokens, std::int64_t(free_rows_.size())));
  PendingRows pending{num_tokens, {}};
  pending.rows.reserve(given);
  std::vector<RowMove> moves;
  moves.reserve(given);
  for (std::size_t i = 0; i < given; ++i) {
    pending.rows.push_back(free_rows_[free_rows_.size() - 1 - i]);
    moves.push_back({std::int32_t(first_row + std::int64_t(i)), pending.rows.back()});
  }
  do_end_pass(moves);
  free_rows_.resize(free_rows_.size() - given);
  const std::uint64_t id = next_pending_id_++;
  pending_.emplace(id, std::move(pending));
  pending_rows_ += std::int64_t(given);
  tallies_.tokens_recorded += std::int64_t(given);
  tallies_.tokens_without_room += num_tokens - std::int64_t(given);
  pass_open_ = false;
  ++tallies_.passes;
  return {id, num_tokens, num_tokens - std::int64_t(given)};
}

SlotCommit RouteRecorder::commit_slots(const PendingSlots& pending,
                                       std::span<const std::int64_t> slots) {
  require_keys(RouteKeys::kSlots, "commit_slots");
  std::lock_guard lock(mutex_);
  const auto found = pending_.find(pending.id);
  MOESTAT_CHECK(found != pending_.end(),
                "route recorder: pending pass {} was committed or released already", pending.id);
  const PendingRows& rows = found->second;
  MOESTAT_CHECK(std::int64_t(slots.size()) == rows.num_tokens,
                "route recorder: {} slots for pending pass {}'s {} tokens", slots.size(),
                pending.id, rows.num_tokens);
  SlotCommit out;
  begin_slot_marks();
  // From the last token: the last to name a slot holds it.
  for (std::size_t i = slots.size(); i-- > 0;) {
    const std::int32_t row = i < rows.rows.size() ? rows.rows[i] : -1;
    const std::int64_t slot = slots[i];
    const bool inside = slot >= 0 && slot < num_slots();
    if (!inside || !mark_slot(slot)) {
      ++(inside ? out.slots_repeated : out.slots_out_of_range);
      if (row >= 0) release_slot_row(row);
      continue;
    }
    std::int32_t& held = slot_rows_[std::size_t(slot)];
    if (held >= 0) release_slot_row(held);
    slots_written_ += std::int64_t(row >= 0) - std::int64_t(held >= 0);
    held = row;
  }
  pending_rows_ -= std::int64_t(rows.rows.size());
  pending_.erase(found);
  return out;
}

bool RouteRecorder::release_pending(const PendingSlots& pending) {
  require_keys(RouteKeys::kSlots, "release_pending");
  std::lock_guard lock(mutex_);
  const auto found = pending_.find(pending.id);
  if (found == pending_.end()) return false;
  for (std::int32_t row : found->second.rows) release_slot_row(row);
  pending_rows_ -= std::int64_t(found->second.rows.size());
  pending_.erase(found);
  return true;
}

std::int64_t RouteRecorder::clear_slots(std::span<const std::int64_t> slots) {
  require_keys(RouteKeys::kSlots, "clear_slots");
  std::lock_guard lock(mutex_);
  std::int64_t outside = 0;
  for (std::int64_t slot : slots) {
    if (slot < 0 || slot >= num_slots()) {
      ++outside;
      continue;
    }
    std::int32_t& held = slot_rows_[std::size_t(slot)];
    if (held < 0) continue;
    release_slot_row(held);
    held = -1;
    --slots_written_;
  }
  return outside;
}

void RouteRecorder::begin_slot_marks() noexcept {
  if (++slot_mark_ == 0) {
    // Wrapped (once per 2^32 calls): marks of old calls could read as this one's.
    std::fill(slot_marks_.begin(), slot_marks_.end(), 0);
    slot_mark_ = 1;
  }
}

bool RouteRecorder::mark_slot(std::int64_t slot) noexcept {
  std::uint32_t& mark = slot_marks_[std::size_t(slot)];
  if (mark == slot_mark_) return false;
  mark = slot_mark_;
  return true;
}

void RouteRecorder::release_slot_row(std::int32_t row) {
  (reads_in_flight_ > 0 ? retired_rows_ : free_rows_).push_back(row);
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
      MOESTAT_CHECK(slot >= -1 && slot < num_slots(), "route recorder: slot {} outside [0, {})",
                    slot, num_slots());
      rows.push_back(slot >= 0 ? slot_rows_[std::size_t(slot)] : -1);
    }
    placement_version = placement_version_;
    model = model_;
    ++reads_in_flight_;
  }
  // Rows a commit frees from now on wait in retired_rows_ until no read may be reading them.
  const auto end_read = [this] {
    std::lock_guard lock(mutex_);
    if (--reads_in_flight_ == 0) {
      free_rows_.insert(free_rows_.end(), retired_rows_.begin(), retired_rows_.end());
      retired_rows_.clear();
    }
  };
  try {
    RoutedExperts routes = RoutedExperts::unrecorded(layout_, std::move(request_id), first_position,
                                                     std::int64_t(rows.size()));
    routes.model = std::move(model);
    routes.placement_version = placement_version;
    const ReadTarget target{0, rows.size(), routes.ids.data.data(), routes.valid.data.data()};
    if (!rows.empty()) do_read_rows(rows, {&target, 1});
    end_read();
    return routes;
  } catch (...) {
    end_read();
    throw;
  }
}

void RouteRecorder::abort_pass() {
  check_pass_control("abort_pass");
  std::unique_lock pass(pass_mutex_);
  std::lock_guard lock(mutex_);
  MOESTAT_CHECK(pass_open_, "route recorder: abort_pass without begin_pass");
  do_abort_pass();
  pass_open_ = false;
}

RoutedExperts RouteRecorder::take(std::string_view request_id) {
  require_keys(RouteKeys::kRequestPositions, "take");
  return std::move(take_then_read({&request_id, 1}, false).front());
}

RoutedExperts RouteRecorder::finish(std::string_view request_id) {
  require_keys(RouteKeys::kRequestPositions, "finish");
  return std::move(take_then_read({&request_id, 1}, true).front());
}

std::vector<RoutedExperts> RouteRecorder::take_many(std::span<const std::string> request_ids) {
  require_keys(RouteKeys::kRequestPositions, "take_many");
  const std::vector<std::string_view> ids(request_ids.begin(), request_ids.end());
  return take_then_read(ids, false);
}

std::vector<RoutedExperts> RouteRecorder::finish_many(std::span<const std::string> request_ids) {
  require_keys(RouteKeys::kRequestPositions, "finish_many");
  const std::vector<std::string_view> ids(request_ids.begin(), request_ids.end());
  return take_then_read(ids, true);
}

std::vector<RoutedExperts> RouteRecorder::take_then_read(
    std::span<const std::string_view> request_ids, bool forget) {
  std::vector<Detached> detached;
  detached.reserve(request_ids.size());
  std::vector<std::int32_t> rows;  // every request's, one after another
  std::uint64_t placement_version = 0;
  std::string model;
  {
    std::lock_guard lock(mutex_);
    for (std::string_view request_id : request_ids) {
      Detached& taken = detached.emplace_back(Detached{std::string(request_id), 0, 0, rows.size()});
      const auto found = requests_.find(request_id);
      if (found == requests_.end()) continue;
      RequestRows& request = found->second;
      // Every held position is in [first_position, end); end_pass's gap bound keeps the gaps
      // between them, handed out as rows not valid, to capacity_tokens per request.
      taken.first_position = request.first_position;
      taken.num_tokens = request.end - request.first_position;
      rows.resize(rows.size() + std::size_t(taken.num_tokens), -1);
      for (const HeldRow& held : request.rows) {
        rows[taken.first_row + std::size_t(held.position - taken.first_position)] = held.row;
      }
      request.rows = {};  // its memory too: a request holds memory only while it holds rows
      request.first_position = request.end;
      request.gap_positions = 0;
      if (forget) requests_.erase(found);
    }
    placement_version = placement_version_;
    model = model_;
  }
  // The rows were removed from the table above, so no pass can be given them before they are
  // read; they become free only once read.
  const auto release_rows = [&] {
    std::lock_guard lock(mutex_);
    for (std::int32_t row : rows) {
      if (row >= 0) release(row);
    }
  };
  std::vector<RoutedExperts> routes;
  try {
    routes.reserve(detached.size());
    for (Detached& taken : detached) {
      routes.push_back(RoutedExperts::unrecorded(layout_, std::move(taken.request_id),
                                                 taken.first_position, taken.num_tokens));
      routes.back().model = model;
      routes.back().placement_version = placement_version;
    }
    std::vector<ReadTarget> targets;
    targets.reserve(routes.size());
    for (std::size_t i = 0; i < routes.size(); ++i) {
      if (detached[i].num_tokens == 0) continue;
      targets.push_back({detached[i].first_row, std::size_t(detached[i].num_tokens),
                         routes[i].ids.data.data(), routes[i].valid.data.data()});
    }
    if (!rows.empty()) do_read_rows(rows, targets);
  } catch (...) {
    release_rows();
    throw;
  }
  release_rows();
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
  names.reserve(requests_.size());
  for (const auto& [name, request] : requests_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

RouteTallies RouteRecorder::tallies() const {
  std::lock_guard lock(mutex_);
  RouteTallies out = tallies_;
  const BackendTallies backend = do_backend_tallies();
  out.invalid_ids = backend.invalid_ids;
  out.layers_written_twice = backend.layers_written_twice;
  out.tokens_pending = pending_rows_;
  out.tokens_held = options_.keys == RouteKeys::kSlots
                        ? slots_written_
                        : options_.capacity_tokens - std::int64_t(free_rows_.size());
  return out;
}

}  // namespace moestat::routes
