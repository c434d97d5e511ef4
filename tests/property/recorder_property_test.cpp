// Property tests: for random topologies, placements, id streams, layouts and control calls,
// every recording mode's snapshot equals that of a naive reference recorder written here.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <moestat/record/cpu_recorder.hpp>
#include <optional>
#include <vector>

namespace moestat {
namespace {

// ---- Naive reference ----

/// Ids of one hook call as plain rows: [valid tokens][columns], whatever the view's layout.
using IdRows = std::vector<std::vector<std::int64_t>>;

/// One pass as the reference keeps it.
struct ReferencePass {
  std::int64_t pass_id = 0;
  std::uint64_t version = 0;                     ///< placement in force at end_pass
  std::vector<std::int64_t> physical;            ///< [L, P]
  std::vector<std::vector<IdRows>> layer_calls;  ///< [L][call] valid rows of topk calls
  std::int64_t dropped_ids = 0;

  std::int64_t layer_tokens(std::size_t layer) const {
    std::int64_t tokens = 0;
    for (const IdRows& rows : layer_calls[layer]) tokens += std::int64_t(rows.size());
    return tokens;
  }
};

/// Does what docs/recording-semantics.md says, in the plainest way: keeps every committed
/// pass in full and derives each mode's snapshot from the list when asked.
class ReferenceRecorder {
 public:
  ReferenceRecorder(ModelTopology topology, RecorderOptions options)
      : topology_(std::move(topology)), options_(options) {
    const std::int64_t p = topology_.num_physical_experts, e = topology_.num_logical_experts;
    std::vector<std::int32_t> trivial;
    for (std::int64_t l = 0; l < topology_.num_layers; ++l)
      for (std::int64_t slot = 0; slot < p; ++slot) trivial.push_back(std::int32_t(slot % e));
    maps_[0] = trivial;
  }

  void start() {
    passes_.clear();
    recording_ = true;
    open_.reset();
  }
  void stop() {
    recording_ = false;
    open_.reset();
  }
  void reset() {
    passes_.clear();
    open_.reset();
  }
  void set_placement(std::uint64_t version, std::vector<std::int32_t> map) {
    maps_[version] = std::move(map);
    version_ = version;
  }

  void begin_pass(std::int64_t pass_id) {
    open_.reset();
    if (!recording_) return;
    open_.emplace();
    open_->pass_id = pass_id;
    open_->physical.assign(std::size_t(topology_.num_layers * topology_.num_physical_experts), 0);
    open_->layer_calls.resize(std::size_t(topology_.num_layers));
  }

  /// `rows`: the valid rows only.
  void record_topk(std::int64_t layer, const IdRows& rows) {
    if (!open_) return;
    const std::int64_t p = topology_.num_physical_experts;
    for (const auto& row : rows) {
      for (std::int64_t id : row) {
        if (id >= 0 && id < p) {
          ++open_->physical[std::size_t(layer * p + id)];
        } else if (id != -1) {
          ++open_->dropped_ids;
        }
      }
    }
    open_->layer_calls[std::size_t(layer)].push_back(rows);
  }

  /// `counts`: [local + shared] entries of rank `rank`.
  void record_local_counts(std::int64_t layer, const std::vector<std::int64_t>& counts,
                           std::int64_t rank) {
    if (!open_) return;
    const std::int64_t p = topology_.num_physical_experts;
    const std::int64_t local = p / topology_.ep_size;
    for (std::int64_t j = 0; j < local; ++j) {
      open_->physical[std::size_t(layer * p + rank * local + j)] += counts[std::size_t(j)];
    }
  }

  void end_pass() {
    if (!open_) return;
    open_->version = version_;
    passes_.push_back(std::move(*open_));
    open_.reset();
  }

  /// Logical counts [L, E] of a pass, with the placement of its version.
  std::vector<std::int64_t> logical(const ReferencePass& pass) const {
    const std::int64_t p = topology_.num_physical_experts, e = topology_.num_logical_experts;
    const std::vector<std::int32_t>& map = maps_.at(pass.version);
    std::vector<std::int64_t> out(std::size_t(topology_.num_layers * e), 0);
    for (std::int64_t l = 0; l < topology_.num_layers; ++l)
      for (std::int64_t slot = 0; slot < p; ++slot)
        out[std::size_t(l * e + map[std::size_t(l * p + slot)])] +=
            pass.physical[std::size_t(l * p + slot)];
    return out;
  }

  /// The snapshot the recorder should hand out now, plus totals computed independently.
  struct Expected {
    Snapshot snapshot;
    std::vector<std::int64_t> logical_totals, physical_totals;
  };

  Expected expected() const {
    const std::int64_t num_layers = topology_.num_layers, k = topology_.top_k;
    const std::int64_t p = topology_.num_physical_experts, e = topology_.num_logical_experts;
    Expected out;
    Snapshot& s = out.snapshot;
    s.mode = options_.mode;
    s.approximate = options_.mode == RecordMode::kStatApprox;
    s.num_layers = num_layers;
    s.num_logical_experts = e;
    s.num_physical_experts = p;
    s.top_k = k;
    s.num_passes = std::int64_t(passes_.size());
    for (const ReferencePass& pass : passes_) s.dropped_ids += pass.dropped_ids;
    out.logical_totals.assign(std::size_t(num_layers * e), 0);
    out.physical_totals.assign(std::size_t(num_layers * p), 0);

    switch (options_.mode) {
      case RecordMode::kStat:
      case RecordMode::kStatApprox:
      case RecordMode::kPerPass: {
        std::size_t first = 0;
        const std::int64_t window = options_.window_size;
        if (options_.mode != RecordMode::kPerPass && window > 0 &&
            std::int64_t(passes_.size()) > window) {
          first = passes_.size() - std::size_t(window);
        }
        for (std::size_t i = first; i < passes_.size(); ++i) {
          const ReferencePass& pass = passes_[i];
          s.pass_ids.push_back(pass.pass_id);
          s.placement_versions.push_back(pass.version);
          std::int64_t tokens = 0;
          for (std::size_t l = 0; l < std::size_t(num_layers); ++l) {
            tokens = std::max(tokens, pass.layer_tokens(l));
          }
          s.pass_num_tokens.push_back(tokens);
          const std::vector<std::int64_t> logical_counts = logical(pass);
          s.physical_counts.insert(s.physical_counts.end(), pass.physical.begin(),
                                   pass.physical.end());
          s.logical_counts.insert(s.logical_counts.end(), logical_counts.begin(),
                                  logical_counts.end());
          for (std::size_t j = 0; j < pass.physical.size(); ++j) {
            out.physical_totals[j] += pass.physical[j];
          }
          for (std::size_t j = 0; j < logical_counts.size(); ++j) {
            out.logical_totals[j] += logical_counts[j];
          }
        }
        break;
      }
      case RecordMode::kPerToken: {
        for (const ReferencePass& pass : passes_) {
          const std::vector<std::int32_t>& map = maps_.at(pass.version);
          std::int64_t tokens = 0;
          for (std::size_t l = 0; l < std::size_t(num_layers); ++l) {
            tokens = std::max(tokens, pass.layer_tokens(l));
          }
          for (std::int64_t t = 0; t < tokens; ++t) {
            if (s.num_tokens() == options_.per_token_capacity) {
              ++s.dropped_tokens;
              continue;
            }
            s.token_pass_ids.push_back(pass.pass_id);
            s.token_placement_versions.push_back(pass.version);
            for (std::int64_t l = 0; l < num_layers; ++l) {
              // Token t of layer l: the t-th valid row over the layer's calls, in call order.
              const std::vector<std::int64_t>* row = nullptr;
              std::int64_t skip = t;
              for (const IdRows& rows : pass.layer_calls[std::size_t(l)]) {
                if (skip < std::int64_t(rows.size())) {
                  row = &rows[std::size_t(skip)];
                  break;
                }
                skip -= std::int64_t(rows.size());
              }
              for (std::int64_t c = 0; c < k; ++c) {
                const std::int64_t id = row == nullptr ? -1 : (*row)[std::size_t(c)];
                const bool counted = id >= 0 && id < p;
                const std::int32_t logical_id =
                    counted ? map[std::size_t(l * p + id)] : std::int32_t(-1);
                s.token_physical_ids.push_back(counted ? std::int32_t(id) : -1);
                s.token_logical_ids.push_back(logical_id);
                if (counted) {
                  ++out.physical_totals[std::size_t(l * p + id)];
                  ++out.logical_totals[std::size_t(l * e + logical_id)];
                }
              }
            }
          }
        }
        break;
      }
      case RecordMode::kDecayed: {
        s.decayed_physical_load.assign(std::size_t(num_layers * p), 0.0);
        s.decayed_logical_load.assign(std::size_t(num_layers * e), 0.0);
        for (const ReferencePass& pass : passes_) {
          const std::vector<std::int64_t> logical_counts = logical(pass);
          for (std::size_t j = 0; j < pass.physical.size(); ++j) {
            s.decayed_physical_load[j] =
                options_.decay * s.decayed_physical_load[j] + double(pass.physical[j]);
          }
          for (std::size_t j = 0; j < logical_counts.size(); ++j) {
            s.decayed_logical_load[j] =
                options_.decay * s.decayed_logical_load[j] + double(logical_counts[j]);
          }
        }
        break;
      }
    }
    return out;
  }

 private:
  ModelTopology topology_;
  RecorderOptions options_;
  bool recording_ = false;
  std::optional<ReferencePass> open_;  ///< the open pass, if it is being recorded
  std::vector<ReferencePass> passes_;  ///< every pass committed since start/reset
  std::map<std::uint64_t, std::vector<std::int32_t>> maps_;
  std::uint64_t version_ = 0;
};

// ---- Comparison ----

bool close(double actual, double expected) {
  return std::abs(actual - expected) <= 1e-9 * std::max(std::abs(actual), std::abs(expected));
}

void check_snapshot(const Snapshot& actual, const ReferenceRecorder::Expected& expected_all) {
  const Snapshot& expected = expected_all.snapshot;
  RC_ASSERT(int(actual.mode) == int(expected.mode));
  RC_ASSERT(actual.approximate == expected.approximate);
  RC_ASSERT(actual.num_layers == expected.num_layers);
  RC_ASSERT(actual.num_logical_experts == expected.num_logical_experts);
  RC_ASSERT(actual.num_physical_experts == expected.num_physical_experts);
  RC_ASSERT(actual.top_k == expected.top_k);
  RC_ASSERT(actual.num_passes == expected.num_passes);
  RC_ASSERT(actual.dropped_ids == expected.dropped_ids);
  RC_ASSERT(actual.dropped_tokens == expected.dropped_tokens);
  RC_ASSERT(actual.pass_ids == expected.pass_ids);
  RC_ASSERT(actual.placement_versions == expected.placement_versions);
  RC_ASSERT(actual.pass_num_tokens == expected.pass_num_tokens);
  RC_ASSERT(actual.physical_counts == expected.physical_counts);
  RC_ASSERT(actual.logical_counts == expected.logical_counts);
  RC_ASSERT(actual.token_pass_ids == expected.token_pass_ids);
  RC_ASSERT(actual.token_placement_versions == expected.token_placement_versions);
  RC_ASSERT(actual.token_physical_ids == expected.token_physical_ids);
  RC_ASSERT(actual.token_logical_ids == expected.token_logical_ids);
  RC_ASSERT(actual.decayed_physical_load.size() == expected.decayed_physical_load.size());
  RC_ASSERT(actual.decayed_logical_load.size() == expected.decayed_logical_load.size());
  for (std::size_t i = 0; i < actual.decayed_physical_load.size(); ++i) {
    RC_ASSERT(close(actual.decayed_physical_load[i], expected.decayed_physical_load[i]));
  }
  for (std::size_t i = 0; i < actual.decayed_logical_load.size(); ++i) {
    RC_ASSERT(close(actual.decayed_logical_load[i], expected.decayed_logical_load[i]));
  }
  RC_ASSERT(actual.logical_totals() == expected_all.logical_totals);
  RC_ASSERT(actual.physical_totals() == expected_all.physical_totals);
}

// ---- Generators ----

ModelTopology gen_topology(RecordMode mode) {
  ModelTopology topology;
  topology.num_layers = *rc::gen::inRange<std::int64_t>(1, 6);
  for (std::int64_t l = 0; l < topology.num_layers; ++l) {
    topology.moe_layers.push_back(*rc::gen::inRange(0, 4) != 0);  // about 1 in 4 dense
  }
  topology.moe_layers[std::size_t(*rc::gen::inRange<std::int64_t>(0, topology.num_layers))] = true;
  topology.num_logical_experts = *rc::gen::inRange<std::int64_t>(1, 9);
  topology.ep_size = *rc::gen::inRange<std::int64_t>(1, 5);
  // P >= E and a multiple of ep_size: local experts per rank from ceil(E / ep) up.
  const std::int64_t min_local =
      (topology.num_logical_experts + topology.ep_size - 1) / topology.ep_size;
  topology.num_physical_experts =
      topology.ep_size * *rc::gen::inRange<std::int64_t>(min_local, min_local + 3);
  topology.top_k = *rc::gen::inRange<std::int64_t>(1, topology.num_logical_experts + 1);
  topology.num_shared_expert_slots = *rc::gen::inRange<std::int64_t>(0, 3);
  if (mode == RecordMode::kPerToken) topology.num_shared_expert_slots = 0;
  return topology;
}

/// A random map where every logical expert has at least one slot in every layer.
std::vector<std::int32_t> gen_placement_map(const ModelTopology& topology) {
  const std::int64_t p = topology.num_physical_experts, e = topology.num_logical_experts;
  std::vector<std::int32_t> map;
  for (std::int64_t l = 0; l < topology.num_layers; ++l) {
    std::vector<std::int32_t> layer;
    for (std::int64_t slot = 0; slot < p; ++slot) {
      layer.push_back(slot < e ? std::int32_t(slot)
                               : *rc::gen::inRange<std::int32_t>(0, std::int32_t(e)));
    }
    for (std::size_t i = 0; i + 1 < layer.size(); ++i) {
      std::swap(layer[i], layer[*rc::gen::inRange<std::size_t>(i, layer.size())]);
    }
    map.insert(map.end(), layer.begin(), layer.end());
  }
  return map;
}

/// A router id: mostly in [0, P), some -1 padding, some out of range on either side,
/// including the extremes of the dtype and (for int64) values that alias small ids mod 2^32.
std::int64_t gen_id(std::int64_t num_physical, bool int64) {
  const int kind = *rc::gen::inRange(0, 100);
  if (kind < 65) return *rc::gen::inRange<std::int64_t>(0, num_physical);
  if (kind < 77) return -1;
  if (kind < 85) return *rc::gen::inRange<std::int64_t>(num_physical, num_physical + 5);
  if (kind < 92) return *rc::gen::inRange<std::int64_t>(-6, -1);
  if (!int64) {
    return *rc::gen::element<std::int64_t>(std::numeric_limits<std::int32_t>::min(),
                                           std::numeric_limits<std::int32_t>::max());
  }
  return *rc::gen::element<std::int64_t>(
      std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(),
      std::int64_t(1) << 32, (std::int64_t(1) << 32) + 1, -(std::int64_t(1) << 32) + 1);
}

enum class Layout { kContiguous, kTransposed, kEveryOtherColumn, kPaddedRows, kBroadcastRows };

/// Owns an id buffer and the view over it.
struct IdBuffer {
  std::vector<std::int32_t> int32;
  std::vector<std::int64_t> int64;
  TensorView view;
};

/// Lays `values` [rows][columns] out in memory as `layout` says. Unused elements hold id 0,
/// which a layout bug would count.
void fill_buffer(IdBuffer& buffer, const IdRows& values, std::int64_t columns, bool int64,
                 Layout layout) {
  const auto rows = std::int64_t(values.size());
  std::int64_t size = 0, row_stride = 0, column_stride = 0;
  switch (layout) {
    case Layout::kContiguous:
      size = rows * columns, row_stride = columns, column_stride = 1;
      break;
    case Layout::kTransposed:
      size = rows * columns, row_stride = 1, column_stride = rows;
      break;
    case Layout::kEveryOtherColumn:
      size = rows * columns * 2, row_stride = 2 * columns, column_stride = 2;
      break;
    case Layout::kPaddedRows:
      size = rows * (columns + 3), row_stride = columns + 3, column_stride = 1;
      break;
    case Layout::kBroadcastRows:
      size = rows == 0 ? 0 : columns, row_stride = 0, column_stride = 1;
      break;
  }
  buffer.int32.assign(std::size_t(size), 0);
  buffer.int64.assign(std::size_t(size), 0);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < columns; ++c) {
      const auto at = std::size_t(r * row_stride + c * column_stride);
      buffer.int32[at] = std::int32_t(values[std::size_t(r)][std::size_t(c)]);
      buffer.int64[at] = values[std::size_t(r)][std::size_t(c)];
    }
  }
  const std::int64_t shape[] = {rows, columns};
  const std::int64_t strides[] = {row_stride, column_stride};
  buffer.view = int64 ? TensorView(buffer.int64.data(), DType::kInt64, shape, strides)
                      : TensorView(buffer.int32.data(), DType::kInt32, shape, strides);
}

// ---- The scenario ----

/// Which hook a call goes through.
enum class Style { kExplicitLayer, kLayerScope, kDisabled };

class Scenario {
 public:
  explicit Scenario(RecordMode mode)
      : mode_(mode),
        topology_(gen_topology(mode)),
        options_(gen_options(mode)),
        recorder_(topology_, options_),
        reference_(topology_, options_) {
    for (std::int64_t l = 0; l < topology_.num_layers; ++l) {
      if (topology_.moe_layers[std::size_t(l)]) moe_layers_.push_back(l);
    }
  }

  void run() {
    recorder_.start();
    reference_.start();
    const int num_passes = *rc::gen::inRange(0, 14);
    for (int pass = 0; pass < num_passes; ++pass) {
      maybe_control(/*in_pass=*/false);
      const auto pass_id = *rc::gen::inRange<std::int64_t>(-1000, 1000);
      recorder_.begin_pass(pass_id);
      reference_.begin_pass(pass_id);
      const int num_hooks = *rc::gen::inRange(0, 6);
      for (int hook = 0; hook < num_hooks; ++hook) {
        maybe_control(/*in_pass=*/true);
        record_one();
      }
      recorder_.end_pass();
      reference_.end_pass();
    }
    check_snapshot(recorder_.snapshot(), reference_.expected());
  }

 private:
  static RecorderOptions gen_options(RecordMode mode) {
    RecorderOptions options;
    options.mode = mode;
    options.window_size = *rc::gen::element<std::int64_t>(-1, 1, 2, 3, 5, 8, 1000);
    options.decay = *rc::gen::element(0.0, 0.5, 0.9, 0.95, 1.0, 0.3);
    options.per_token_capacity = *rc::gen::inRange<std::int64_t>(1, 40);
    return options;
  }

  /// Between hooks or passes: now and then a control call, mirrored in the reference.
  void maybe_control(bool in_pass) {
    const int roll = *rc::gen::inRange(0, in_pass ? 200 : 100);
    if (roll < 5) {
      recorder_.stop();
      reference_.stop();
    } else if (roll < 10) {
      recorder_.start();
      reference_.start();
    } else if (roll < 14) {
      recorder_.reset();
      reference_.reset();
    } else if (roll < 24) {
      version_ += *rc::gen::inRange<std::uint64_t>(1, 4);
      std::vector<std::int32_t> map = gen_placement_map(topology_);
      recorder_.set_placement(Placement(topology_.num_layers, topology_.num_physical_experts,
                                        topology_.num_logical_experts, map, version_));
      reference_.set_placement(version_, std::move(map));
    } else if (roll < 30) {
      check_snapshot(recorder_.snapshot(), reference_.expected());
    }
  }

  void record_one() {
    const std::int64_t layer = *rc::gen::elementOf(moe_layers_);
    const Style style = *rc::gen::element(Style::kExplicitLayer, Style::kExplicitLayer,
                                          Style::kLayerScope, Style::kDisabled);
    bool topk = mode_ != RecordMode::kStatApprox;
    if (mode_ != RecordMode::kPerToken && mode_ != RecordMode::kStatApprox) {
      topk = *rc::gen::arbitrary<bool>();
    }
    if (style == Style::kDisabled) {
      auto region = recorder_.disabled_region();
      topk ? record_topk(layer, style) : record_local_counts(layer, style);
    } else {
      topk ? record_topk(layer, style) : record_local_counts(layer, style);
    }
  }

  void record_topk(std::int64_t layer, Style style) {
    const std::int64_t p = topology_.num_physical_experts;
    const auto rows = *rc::gen::inRange<std::int64_t>(0, 9);
    const std::int64_t columns =
        topology_.top_k +
        (mode_ == RecordMode::kPerToken ? 0 : *rc::gen::inRange<std::int64_t>(0, 3));
    const bool int64 = *rc::gen::arbitrary<bool>();
    const Layout layout =
        *rc::gen::element(Layout::kContiguous, Layout::kTransposed, Layout::kEveryOtherColumn,
                          Layout::kPaddedRows, Layout::kBroadcastRows);
    IdRows values(static_cast<std::size_t>(rows),
                  std::vector<std::int64_t>(static_cast<std::size_t>(columns)));
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < columns; ++c) {
        values[std::size_t(r)][std::size_t(c)] = layout == Layout::kBroadcastRows && r > 0
                                                     ? values[0][std::size_t(c)]
                                                     : gen_id(p, int64);
      }
    }
    IdBuffer ids;
    fill_buffer(ids, values, columns, int64, layout);

    // How the valid-token count is given: default (all), an explicit count, or a tensor.
    const int count_kind = *rc::gen::inRange(0, 4);
    const std::int64_t valid =
        count_kind == 0 ? rows : *rc::gen::inRange<std::int64_t>(0, rows + 1);
    const IdRows valid_rows(values.begin(), values.begin() + valid);
    if (style != Style::kDisabled) reference_.record_topk(layer, valid_rows);

    // Inside a disabled region, half the calls name a layer that would be an error.
    const std::int64_t hook_layer =
        style == Style::kDisabled && *rc::gen::arbitrary<bool>() ? topology_.num_layers : layer;
    if (count_kind <= 1 && style == Style::kLayerScope) {
      auto scope = recorder_.layer_scope(layer);
      count_kind == 0 ? recorder_.record_topk(ids.view) : recorder_.record_topk(ids.view, valid);
    } else if (count_kind == 0) {
      recorder_.record_topk(hook_layer, ids.view);
    } else if (count_kind == 1) {
      recorder_.record_topk(hook_layer, ids.view, valid);
    } else {
      // A one-element tensor: 0-d, [1], [1, 1] or a strided [1] slice, int32 or int64.
      const std::int64_t counts64[] = {valid, -7};
      const std::int32_t counts32[] = {std::int32_t(valid), -7};
      const bool count64 = *rc::gen::arbitrary<bool>();
      const void* data = count64 ? static_cast<const void*>(counts64) : counts32;
      const DType dtype = count64 ? DType::kInt64 : DType::kInt32;
      const int rank = *rc::gen::inRange(0, 3);
      const std::int64_t shape[] = {1, 1};
      const std::int64_t strides[] = {2, 2};
      const TensorView count(data, dtype, std::span(shape, std::size_t(rank)),
                             std::span(strides, std::size_t(rank)));
      recorder_.record_topk(hook_layer, ids.view, count);
    }
  }

  void record_local_counts(std::int64_t layer, Style style) {
    const std::int64_t local = topology_.num_local_experts();
    const std::int64_t length = local + topology_.num_shared_expert_slots;
    const auto rank = *rc::gen::inRange<std::int64_t>(0, topology_.ep_size);
    std::vector<std::int64_t> counts;
    for (std::int64_t j = 0; j < length; ++j) {
      counts.push_back(j < local ? *rc::gen::inRange<std::int64_t>(0, 60)
                                 : *rc::gen::inRange<std::int64_t>(0, 1000));  // shared: dropped
    }
    if (style != Style::kDisabled) reference_.record_local_counts(layer, counts, rank);

    // Contiguous or strided, int32 or int64.
    const auto stride = *rc::gen::inRange<std::int64_t>(1, 4);
    const bool int64 = *rc::gen::arbitrary<bool>();
    std::vector<std::int64_t> buffer64(std::size_t(length * stride), 5);
    std::vector<std::int32_t> buffer32(std::size_t(length * stride), 5);
    for (std::int64_t j = 0; j < length; ++j) {
      buffer64[std::size_t(j * stride)] = counts[std::size_t(j)];
      buffer32[std::size_t(j * stride)] = std::int32_t(counts[std::size_t(j)]);
    }
    const std::int64_t shape[] = {length};
    const std::int64_t strides[] = {stride};
    const TensorView view = int64 ? TensorView(buffer64.data(), DType::kInt64, shape, strides)
                                  : TensorView(buffer32.data(), DType::kInt32, shape, strides);
    if (style == Style::kLayerScope) {
      auto scope = recorder_.layer_scope(layer);
      recorder_.record_local_counts(view, rank);
    } else if (style == Style::kDisabled) {
      recorder_.record_local_counts(*rc::gen::arbitrary<bool>() ? layer : -1, view, rank);
    } else {
      recorder_.record_local_counts(layer, view, rank);
    }
  }

  RecordMode mode_;
  ModelTopology topology_;
  RecorderOptions options_;
  record::CpuRecorder recorder_;
  ReferenceRecorder reference_;
  std::vector<std::int64_t> moe_layers_;
  std::uint64_t version_ = 0;
};

RC_GTEST_PROP(RecorderProperty, StatMatchesReference, ()) { Scenario(RecordMode::kStat).run(); }

RC_GTEST_PROP(RecorderProperty, StatApproxMatchesReference, ()) {
  Scenario(RecordMode::kStatApprox).run();
}

RC_GTEST_PROP(RecorderProperty, PerPassMatchesReference, ()) {
  Scenario(RecordMode::kPerPass).run();
}

RC_GTEST_PROP(RecorderProperty, PerTokenMatchesReference, ()) {
  Scenario(RecordMode::kPerToken).run();
}

RC_GTEST_PROP(RecorderProperty, DecayedMatchesReference, ()) {
  Scenario(RecordMode::kDecayed).run();
}

}  // namespace
}  // namespace moestat
