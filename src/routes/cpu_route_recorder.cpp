// CpuRouteRecorder: each layer's ids written into the scratch row of their batch row, and
// moved into the store when the pass ends.
#include <algorithm>
#include <cstring>
#include <moestat/routes/cpu_route_recorder.hpp>

namespace moestat::routes {
namespace {

/// Where one layer's column of the pass's scratch lies: row t's cell is t * cells_per_row,
/// its ids t * row_bytes bytes on.
struct ScratchColumn {
  std::uint32_t* stamps;
  std::uint32_t* invalid;
  std::byte* ids;
  std::int64_t cells_per_row;
  std::int64_t row_bytes;
  std::uint32_t pass_stamp;
};

/// Whether a logical expert appears twice (replicas of one expert chosen as two).
template <typename Out>
bool has_repeat(const std::vector<Out>& ids) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (ids[i] == ids[j]) return true;
    }
  }
  return false;
}

/// Maps one layer's `Id` rows through `map` ([P] logical ids) into the scratch as `Out` (the
/// layout's narrow id type: every logical id fits), row by row; a row written in this pass
/// already is left as it is. Returns how many were.
template <typename Id, typename Out>
std::int64_t write_column(const TensorView& topk_ids, const std::int32_t* map,
                          std::int64_t num_physical, const ScratchColumn& scratch) {
  const auto* ids = static_cast<const Id*>(topk_ids.data());
  const std::int64_t row_stride = topk_ids.stride(0);
  const std::int64_t column_stride = topk_ids.stride(1);
  const std::int64_t top_k = topk_ids.size(1);
  std::vector<Out> logical(std::size_t(top_k), Out{0});
  std::int64_t written_twice = 0;
  for (std::int64_t t = 0; t < topk_ids.size(0); ++t) {
    std::uint32_t& stamp = scratch.stamps[t * scratch.cells_per_row];
    if (stamp == scratch.pass_stamp) {
      ++written_twice;
      continue;
    }
    const Id* row = ids + t * row_stride;
    bool in_range = true;
    for (std::int64_t k = 0; k < top_k && in_range; ++k) {
      const auto id = std::int64_t(row[k * column_stride]);
      in_range = id >= 0 && id < num_physical;
      if (in_range) logical[std::size_t(k)] = Out(map[id]);
    }
    if (!in_range || has_repeat(logical)) {
      // Tallied at end_pass, if a span covers the row: padding rows are no routed token's.
      scratch.invalid[t * scratch.cells_per_row] = scratch.pass_stamp;
      continue;
    }
    // Host order, which is little-endian as every moestat tensor.
    std::memcpy(scratch.ids + t * scratch.row_bytes, logical.data(),
                std::size_t(top_k) * sizeof(Out));
    stamp = scratch.pass_stamp;
  }
  return written_twice;
}

template <typename Id>
std::int64_t write_column_as(DType out_dtype, const TensorView& topk_ids, const std::int32_t* map,
                             std::int64_t num_physical, const ScratchColumn& scratch) {
  switch (out_dtype) {
    case DType::kUInt8:
      return write_column<Id, std::uint8_t>(topk_ids, map, num_physical, scratch);
    case DType::kUInt16:
      return write_column<Id, std::uint16_t>(topk_ids, map, num_physical, scratch);
    default:
      return write_column<Id, std::int32_t>(topk_ids, map, num_physical, scratch);
  }
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
  const std::int64_t num_physical = topology().num_physical_experts;
  const std::int64_t column_bytes = row_id_bytes() / num_columns;
  std::lock_guard lock(record_mutex_);
  for (const ColumnIds& layer : layers) {
    layer.topk_ids.require_cpu("route recorder: top-k ids");
    const std::int32_t* map = physical_to_logical_.data() + layer.column * num_physical;
    const ScratchColumn scratch{scratch_stamps_.data() + layer.column,
                                scratch_invalid_.data() + layer.column,
                                scratch_ids_.data() + layer.column * column_bytes,
                                num_columns,
                                row_id_bytes(),
                                pass_stamp_};
    // The base class lets only int32 and int64 through.
    const std::int64_t written_twice =
        layer.topk_ids.dtype() == DType::kInt32
            ? write_column_as<std::int32_t>(layout().id_dtype(), layer.topk_ids, map, num_physical,
                                            scratch)
            : write_column_as<std::int64_t>(layout().id_dtype(), layer.topk_ids, map, num_physical,
                                            scratch);
    if (written_twice > 0) {
      layers_written_twice_.fetch_add(written_twice, std::memory_order_relaxed);
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
