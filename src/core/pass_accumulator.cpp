#include "pass_accumulator.hpp"

#include <algorithm>
#include <moestat/error.hpp>
#include <set>

#include "logical_counts.hpp"

namespace moestat::detail {

PassAccumulator::PassAccumulator(const ModelTopology& topology, const RecorderOptions& options)
    : mode_(options.mode),
      num_layers_(topology.num_layers),
      num_logical_(topology.num_logical_experts),
      num_physical_(topology.num_physical_experts),
      top_k_(topology.top_k),
      window_capacity_(options.mode == RecordMode::kPerPass ? -1 : options.window_size),
      decay_(options.decay),
      token_capacity_(options.per_token_capacity) {
  placements_.emplace(0, Placement::trivial(num_layers_, num_physical_, num_logical_, 0));
  if (mode_ == RecordMode::kDecayed) {
    decayed_physical_.assign(std::size_t(num_layers_ * num_physical_), 0.0);
    decayed_logical_.assign(std::size_t(num_layers_ * num_logical_), 0.0);
  }
  if (mode_ == RecordMode::kPerToken) {
    // NOTE: allocated now so that a long run can drop tokens but never run out of memory.
    token_ids_.reserve(std::size_t(token_capacity_ * num_layers_ * top_k_));
    token_pass_ids_.reserve(std::size_t(token_capacity_));
    token_versions_.reserve(std::size_t(token_capacity_));
  }
}

void PassAccumulator::commit(const PassRecord& pass) {
  ++tallies_.num_passes;
  tallies_.dropped_ids += pass.dropped_ids;
  switch (mode_) {
    case RecordMode::kStat:
    case RecordMode::kStatApprox:
    case RecordMode::kPerPass:
      commit_window(pass);
      break;
    case RecordMode::kDecayed:
      commit_decayed(pass);
      break;
    case RecordMode::kPerToken:
      commit_tokens(pass);
      break;
  }
}

std::int64_t* PassAccumulator::window_counts(std::int64_t row) const {
  return window_chunks_[std::size_t(row / kWindowChunkRows)].get() +
         (row % kWindowChunkRows) * num_layers_ * num_physical_;
}

std::int64_t PassAccumulator::window_row(std::int64_t i) const {
  const auto rows = std::int64_t(window_pass_ids_.size());
  const bool full = window_capacity_ > 0 && rows == window_capacity_;
  return full ? (next_row_ + i) % rows : i;
}

void PassAccumulator::commit_window(const PassRecord& pass) {
  const std::int64_t row_size = num_layers_ * num_physical_;
  const auto rows = std::int64_t(window_pass_ids_.size());
  std::int64_t row;
  if (window_capacity_ < 0 || rows < window_capacity_) {
    row = rows;
    if (row == std::int64_t(window_chunks_.size()) * kWindowChunkRows) {
      // Not zeroed: every row is written whole before it is read, so its pages are touched
      // only as passes fill them.
      window_chunks_.push_back(
          std::make_unique_for_overwrite<std::int64_t[]>(std::size_t(kWindowChunkRows * row_size)));
    }
    window_pass_ids_.push_back(0);
    window_num_tokens_.push_back(0);
    window_versions_.push_back(0);
  } else {
    row = next_row_;
    next_row_ = (next_row_ + 1) % window_capacity_;
  }
  window_pass_ids_[std::size_t(row)] = pass.pass_id;
  window_num_tokens_[std::size_t(row)] = pass.num_tokens;
  window_versions_[std::size_t(row)] = current_placement().version();
  std::int64_t* out = window_counts(row);
  for (std::int64_t layer = 0; layer < num_layers_; ++layer) {
    const std::int64_t* in = pass.physical_counts.data() + layer * pass.row_stride;
    std::copy(in, in + num_physical_, out + layer * num_physical_);
  }
}

void PassAccumulator::commit_decayed(const PassRecord& pass) {
  for (double& load : decayed_physical_) load *= decay_;
  for (double& load : decayed_logical_) load *= decay_;
  const Placement& placement = current_placement();
  for (std::int64_t layer = 0; layer < num_layers_; ++layer) {
    const std::int64_t* in = pass.physical_counts.data() + layer * pass.row_stride;
    for (std::int64_t slot = 0; slot < num_physical_; ++slot) {
      const auto count = double(in[slot]);
      decayed_physical_[std::size_t(layer * num_physical_ + slot)] += count;
      decayed_logical_[std::size_t(layer * num_logical_ + placement.logical_of(layer, slot))] +=
          count;
    }
  }
}

void PassAccumulator::commit_tokens(const PassRecord& pass) {
  const std::int64_t kept = std::int64_t(token_pass_ids_.size());
  const std::int64_t fit = std::min(pass.num_trace_tokens, token_capacity_ - kept);
  tallies_.dropped_tokens += pass.num_trace_tokens - fit;
  const std::size_t token_size = std::size_t(num_layers_ * top_k_);
  token_ids_.insert(token_ids_.end(), pass.trace_ids.begin(),
                    pass.trace_ids.begin() + std::ptrdiff_t(std::size_t(fit) * token_size));
  token_pass_ids_.insert(token_pass_ids_.end(), std::size_t(fit), pass.pass_id);
  token_versions_.insert(token_versions_.end(), std::size_t(fit), current_placement().version());
}

void PassAccumulator::clear() {
  window_chunks_.clear();
  window_pass_ids_.clear();
  window_num_tokens_.clear();
  window_versions_.clear();
  next_row_ = 0;
  std::fill(decayed_physical_.begin(), decayed_physical_.end(), 0.0);
  std::fill(decayed_logical_.begin(), decayed_logical_.end(), 0.0);
  token_ids_.clear();
  token_pass_ids_.clear();
  token_versions_.clear();
  tallies_ = {};
  ++generation_;
  forget_unreferenced_placements();
}

void PassAccumulator::set_placement(const Placement& placement) {
  const std::uint64_t current = current_placement().version();
  MOESTAT_CHECK(placement.version() > current,
                "placement version {} must be higher than the current version {}",
                placement.version(), current);
  placements_.emplace(placement.version(), placement);
  forget_unreferenced_placements();
}

void PassAccumulator::forget_unreferenced_placements() {
  std::set<std::uint64_t> used(window_versions_.begin(), window_versions_.end());
  used.insert(token_versions_.begin(), token_versions_.end());
  used.insert(current_placement().version());
  std::erase_if(placements_, [&](const auto& entry) { return !used.contains(entry.first); });
}

template <typename Rows>
void PassAccumulator::copy_window_rows(std::int64_t first, std::int64_t count, Rows& out) const {
  const std::int64_t physical_size = num_layers_ * num_physical_;
  const std::int64_t logical_size = num_layers_ * num_logical_;
  out.physical_counts.resize(std::size_t(count * physical_size));
  out.logical_counts.assign(std::size_t(count * logical_size), 0);
  for (std::int64_t i = 0; i < count; ++i) {
    const auto row = std::size_t(window_row(first + i));
    out.push_back(window_pass_ids_[row], window_versions_[row], window_num_tokens_[row]);
    const std::int64_t* in = window_counts(std::int64_t(row));
    std::copy(in, in + physical_size, out.physical_counts.begin() + i * physical_size);
    add_logical_counts(placement(window_versions_[row]), in,
                       out.logical_counts.data() + i * logical_size);
  }
}

Snapshot PassAccumulator::snapshot() const {
  Snapshot out;
  out.mode = mode_;
  out.approximate = mode_ == RecordMode::kStatApprox;
  out.num_layers = num_layers_;
  out.num_logical_experts = num_logical_;
  out.num_physical_experts = num_physical_;
  out.top_k = top_k_;
  out.tallies() = tallies_;

  copy_window_rows(0, std::int64_t(window_pass_ids_.size()), out);

  out.decayed_physical_load = decayed_physical_;
  out.decayed_logical_load = decayed_logical_;

  out.token_pass_ids = token_pass_ids_;
  out.token_placement_versions = token_versions_;
  out.token_physical_ids = token_ids_;
  out.token_logical_ids.resize(token_ids_.size());
  const std::size_t token_size = std::size_t(num_layers_ * top_k_);
  for (std::size_t token = 0; token < token_pass_ids_.size(); ++token) {
    const Placement& map = placement(token_versions_[token]);
    for (std::size_t entry = 0; entry < token_size; ++entry) {
      const std::size_t index = token * token_size + entry;
      const std::int32_t physical = token_ids_[index];
      const auto layer = std::int64_t(entry) / top_k_;
      out.token_logical_ids[index] = physical < 0 ? -1 : map.logical_of(layer, physical);
    }
  }
  return out;
}

PassesSince PassAccumulator::passes_since(std::uint64_t generation,
                                          std::int64_t first_arrival) const {
  MOESTAT_CHECK(mode_ != RecordMode::kDecayed && mode_ != RecordMode::kPerToken,
                "passes_since needs a recorder that keeps passes (stat, stat_approx or "
                "per_pass), not {}",
                record_mode_name(mode_));
  const std::int64_t wanted = generation == generation_ ? first_arrival : 0;
  MOESTAT_CHECK(wanted >= 0 && wanted <= tallies_.num_passes,
                "passes_since: arrival {} is outside the {} passes that reached the window",
                first_arrival, tallies_.num_passes);
  PassesSince out;
  out.num_layers = num_layers_;
  out.num_logical_experts = num_logical_;
  out.num_physical_experts = num_physical_;
  out.generation = generation_;
  out.tallies() = tallies_;

  // Every committed pass reached the window: the rows hold arrivals [first_kept, num_passes).
  const std::int64_t first_kept = tallies_.num_passes - std::int64_t(window_pass_ids_.size());
  out.first_arrival = std::max(wanted, first_kept);
  out.missed_passes = out.first_arrival - wanted;
  copy_window_rows(out.first_arrival - first_kept, tallies_.num_passes - out.first_arrival, out);
  return out;
}

}  // namespace moestat::detail
