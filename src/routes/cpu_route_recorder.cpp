// CpuRouteRecorder: each layer's ids written into the scratch row of their batch row, and
// moved into the store when the pass ends.
#include <algorithm>
#include <cstring>
#include <moestat/routes/cpu_route_recorder.hpp>

namespace moestat::routes {
namespace {

/// Whether a logical expert appears twice (replicas of one expert chosen as two).
bool has_repeat(const std::vector<std::int64_t>& ids) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (ids[i] == ids[j]) return true;
    }
  }
  return false;
}

}  // namespace

CpuRouteRecorder::CpuRouteRecorder(ModelTopology topology, RouteRecorderOptions options)
    : RouteRecorder(std::move(topology), options) {
  const std::int64_t rows = this->options().max_tokens_per_pass;
  const std::int64_t capacity = this->options().capacity_tokens;
  scratch_ids_.assign(std::size_t(rows * row_id_bytes()), std::byte{0});
  scratch_stamps_.assign(std::size_t(rows * layout().num_columns()), 0);
  scratch_invalid_.assign(std::size_t(rows * layout().num_columns()), 0);
  ids_.assign(std::size_t(capacity * row_id_bytes()), std::byte{0});
  valid_.assign(std::size_t(capacity * layout().num_columns()), std::byte{0});
  set_placement(Placement::trivial(this->topology().num_layers,
                                   this->topology().num_physical_experts,
                                   this->topology().num_logical_experts));
}

std::int64_t CpuRouteRecorder::row_id_bytes() const noexcept {
  return layout().num_columns() * layout().top_k * std::int64_t(dtype_size(layout().id_dtype()));
}

void CpuRouteRecorder::advance_stamp() noexcept {
  // 0 is what the scratch starts with: never a pass's stamp.
  if (++pass_stamp_ == 0) pass_stamp_ = 1;
}

void CpuRouteRecorder::do_begin_pass() {
  if (!next_physical_to_logical_.empty()) {
    physical_to_logical_ = std::move(next_physical_to_logical_);
    next_physical_to_logical_.clear();
  }
}

void CpuRouteRecorder::do_record(std::span<const ColumnIds> layers) {
  const std::int64_t num_columns = layout().num_columns();
  const std::int64_t top_k = layout().top_k;
  const std::int64_t num_physical = topology().num_physical_experts;
  const auto id_size = std::int64_t(dtype_size(layout().id_dtype()));
  std::vector<std::int64_t> logical(static_cast<std::size_t>(top_k));
  std::lock_guard lock(record_mutex_);
  for (const ColumnIds& layer : layers) {
    layer.topk_ids.require_cpu("route recorder: top-k ids");
    const std::int32_t* map = physical_to_logical_.data() + layer.column * num_physical;
    for (std::int64_t t = 0; t < layer.topk_ids.size(0); ++t) {
      std::uint32_t& stamp = scratch_stamps_[std::size_t(t * num_columns + layer.column)];
      if (stamp == pass_stamp_) {
        layers_written_twice_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      bool in_range = true;
      for (std::int64_t k = 0; k < top_k; ++k) {
        const std::int64_t id = layer.topk_ids.int_at({t, k});
        in_range = in_range && id >= 0 && id < num_physical;
        logical[std::size_t(k)] = in_range ? map[id] : 0;
      }
      if (!in_range || has_repeat(logical)) {
        // Tallied at end_pass, if a span covers the row: padding rows are no routed token's.
        scratch_invalid_[std::size_t(t * num_columns + layer.column)] = pass_stamp_;
        continue;
      }
      std::byte* out = scratch_ids_.data() + (t * num_columns + layer.column) * top_k * id_size;
      for (std::int64_t k = 0; k < top_k; ++k) {
        // Little-endian, as every moestat tensor: the low bytes of the id.
        for (std::int64_t b = 0; b < id_size; ++b) {
          out[k * id_size + b] =
              std::byte((std::uint64_t(logical[std::size_t(k)]) >> (8 * b)) & 0xff);
        }
      }
      stamp = pass_stamp_;
    }
  }
}

void CpuRouteRecorder::do_end_pass(std::span<const RowMove> moves) {
  const std::int64_t num_columns = layout().num_columns();
  const std::int64_t column_bytes = row_id_bytes() / num_columns;
  for (const RowMove& move : moves) {
    for (std::int64_t c = 0; c < num_columns; ++c) {
      const auto cell = std::size_t(move.batch_row * num_columns + c);
      const bool written = scratch_stamps_[cell] == pass_stamp_;
      if (!written && scratch_invalid_[cell] == pass_stamp_) ++invalid_ids_;
      std::byte* out = ids_.data() + (move.store_row * num_columns + c) * column_bytes;
      if (written) {
        std::memcpy(out, scratch_ids_.data() + (move.batch_row * num_columns + c) * column_bytes,
                    std::size_t(column_bytes));
      } else {
        std::fill_n(out, column_bytes, std::byte{0});
      }
      valid_[std::size_t(move.store_row * num_columns + c)] = std::byte(written ? 1 : 0);
    }
  }
  advance_stamp();
}

void CpuRouteRecorder::do_read_rows(std::span<const std::int32_t> rows,
                                    std::span<const ReadTarget> targets) {
  const std::int64_t num_columns = layout().num_columns();
  for (const ReadTarget& target : targets) {
    for (std::size_t i = 0; i < target.count; ++i) {
      const std::int32_t row = rows[target.first + i];
      if (row < 0) continue;  // the target's zeros stay
      std::memcpy(target.ids + std::int64_t(i) * row_id_bytes(), ids_.data() + row * row_id_bytes(),
                  std::size_t(row_id_bytes()));
      std::memcpy(target.valid + std::int64_t(i) * num_columns, valid_.data() + row * num_columns,
                  std::size_t(num_columns));
    }
  }
}

void CpuRouteRecorder::do_set_placement(std::span<const std::int32_t> physical_to_logical) {
  // Installed by the next begin_pass, which no hook runs beside (the pass lock): a pass maps
  // through one placement throughout.
  next_physical_to_logical_.assign(physical_to_logical.begin(), physical_to_logical.end());
}

RouteRecorder::BackendTallies CpuRouteRecorder::do_backend_tallies() const {
  return {invalid_ids_, layers_written_twice_.load(std::memory_order_relaxed)};
}

}  // namespace moestat::routes
