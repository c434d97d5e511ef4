// moestat snapshot documents: every Snapshot field, exactly, with shapes checked both ways.
#include <array>
#include <cmath>
#include <limits>
#include <moestat/error.hpp>
#include <moestat/io/snapshot_json.hpp>
#include <moestat/topology.hpp>

#include "json_support.hpp"
#include "readers.hpp"

namespace moestat::io {
namespace {

using detail::Json;
using detail::OrderedJson;

constexpr std::int64_t kMaxInt64 = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMaxInt32 = std::numeric_limits<std::int32_t>::max();

/// Throws unless `values` holds exactly the product of `shape`.
template <typename T>
void check_size(const std::vector<T>& values, std::string_view name,
                std::span<const std::int64_t> shape) {
  std::int64_t expected = 1;
  for (std::int64_t size : shape) expected *= size;
  MOESTAT_CHECK(std::int64_t(values.size()) == expected,
                "snapshot field {} has {} entries, expected {} ([{}])", name, values.size(),
                expected, fmt::join(shape, " x "));
}

/// The position of flat index `flat` in `shape`, for messages.
std::vector<std::int64_t> unflatten(std::int64_t flat, std::span<const std::int64_t> shape) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

/// Throws, naming the element, unless every value is in [min, max].
template <typename T>
void check_range(const std::vector<T>& values, std::string_view name,
                 std::span<const std::int64_t> shape, std::int64_t min, std::int64_t max,
                 std::string_view expected) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto value = std::int64_t(values[i]);
    if (value < min || value > max) {
      MOESTAT_FAIL("{} is {}, expected {}",
                   detail::element_name(name, unflatten(std::int64_t(i), shape)), value, expected);
    }
  }
}

void check_loads(const std::vector<double>& loads, std::string_view name,
                 std::span<const std::int64_t> shape) {
  if (loads.empty()) return;  // absent outside decayed mode
  check_size(loads, name, shape);
  for (std::size_t i = 0; i < loads.size(); ++i) {
    if (!std::isfinite(loads[i]) || loads[i] < 0.0) {
      MOESTAT_FAIL("{} is {}, expected a finite non-negative load",
                   detail::element_name(name, unflatten(std::int64_t(i), shape)), loads[i]);
    }
  }
}

/// Loads are [] when absent and [rows][cols] otherwise.
OrderedJson loads_to_json(const std::vector<double>& loads, std::array<std::int64_t, 2> shape) {
  if (loads.empty()) return OrderedJson::array();
  return detail::to_nested<double>(loads, shape);
}

}  // namespace

void validate_snapshot(const Snapshot& s) {
  MOESTAT_CHECK(s.num_layers > 0 && s.num_layers <= kMaxInt32,
                "snapshot num_layers is {}, expected an integer in [1, {}]", s.num_layers,
                kMaxInt32);
  MOESTAT_CHECK(s.num_logical_experts > 0 && s.num_logical_experts <= kMaxInt32,
                "snapshot num_logical_experts is {}, expected an integer in [1, {}]",
                s.num_logical_experts, kMaxInt32);
  MOESTAT_CHECK(
      s.num_physical_experts >= s.num_logical_experts && s.num_physical_experts <= kMaxInt32,
      "snapshot num_physical_experts is {}, expected an integer in [{} "
      "(num_logical_experts), {}]",
      s.num_physical_experts, s.num_logical_experts, kMaxInt32);
  check_layer_slots("snapshot", s.num_layers, s.num_physical_experts);
  MOESTAT_CHECK(s.top_k > 0 && s.top_k <= s.num_physical_experts,
                "snapshot top_k is {}, expected an integer in [1, {}]", s.top_k,
                s.num_physical_experts);
  MOESTAT_CHECK(s.approximate == (s.mode == RecordMode::kStatApprox),
                "snapshot approximate is {} but mode is {}", s.approximate,
                record_mode_name(s.mode));
  MOESTAT_CHECK(s.num_passes >= 0, "snapshot num_passes is {}, expected a non-negative integer",
                s.num_passes);
  MOESTAT_CHECK(s.dropped_ids >= 0, "snapshot dropped_ids is {}, expected a non-negative integer",
                s.dropped_ids);
  MOESTAT_CHECK(s.dropped_tokens >= 0,
                "snapshot dropped_tokens is {}, expected a non-negative integer", s.dropped_tokens);
  MOESTAT_CHECK(s.dropped_passes >= 0,
                "snapshot dropped_passes is {}, expected a non-negative integer", s.dropped_passes);

  const std::int64_t window = s.window_size();
  MOESTAT_CHECK(s.num_passes >= window, "snapshot num_passes is {} but its window holds {} passes",
                s.num_passes, window);
  const std::array<std::int64_t, 1> window_shape{window};
  check_size(s.placement_versions, "placement_versions", window_shape);
  check_size(s.pass_num_tokens, "pass_num_tokens", window_shape);
  check_range(s.pass_num_tokens, "pass_num_tokens", window_shape, 0, kMaxInt64,
              "a non-negative token count");
  const std::array<std::int64_t, 3> logical_shape{window, s.num_layers, s.num_logical_experts};
  const std::array<std::int64_t, 3> physical_shape{window, s.num_layers, s.num_physical_experts};
  check_size(s.logical_counts, "logical_count", logical_shape);
  check_size(s.physical_counts, "physical_count", physical_shape);
  check_range(s.logical_counts, "logical_count", logical_shape, 0, kMaxInt64,
              "a non-negative count");
  check_range(s.physical_counts, "physical_count", physical_shape, 0, kMaxInt64,
              "a non-negative count");

  check_loads(s.decayed_logical_load, "decayed_logical_load",
              std::array<std::int64_t, 2>{s.num_layers, s.num_logical_experts});
  check_loads(s.decayed_physical_load, "decayed_physical_load",
              std::array<std::int64_t, 2>{s.num_layers, s.num_physical_experts});

  const std::int64_t tokens = s.num_tokens();
  check_size(s.token_placement_versions, "token_placement_versions",
             std::array<std::int64_t, 1>{tokens});
  const std::array<std::int64_t, 3> token_shape{tokens, s.num_layers, s.top_k};
  check_size(s.token_physical_ids, "token_physical_ids", token_shape);
  check_size(s.token_logical_ids, "token_logical_ids", token_shape);
  check_range(s.token_physical_ids, "token_physical_ids", token_shape, -1,
              s.num_physical_experts - 1,
              fmt::format("a physical id in [0, {}) or -1", s.num_physical_experts));
  check_range(s.token_logical_ids, "token_logical_ids", token_shape, -1, s.num_logical_experts - 1,
              fmt::format("a logical id in [0, {}) or -1", s.num_logical_experts));
}

std::string snapshot_to_json(const Snapshot& s) {
  validate_snapshot(s);
  const std::int64_t window = s.window_size();
  const std::int64_t tokens = s.num_tokens();
  OrderedJson doc = OrderedJson::object();
  doc["format"] = kSnapshotFormat;
  doc["version"] = kSnapshotFormatVersion;
  doc["mode"] = record_mode_name(s.mode);
  doc["approximate"] = s.approximate;
  doc["num_layers"] = s.num_layers;
  doc["num_logical_experts"] = s.num_logical_experts;
  doc["num_physical_experts"] = s.num_physical_experts;
  doc["top_k"] = s.top_k;
  doc["num_passes"] = s.num_passes;
  doc["dropped_ids"] = s.dropped_ids;
  doc["dropped_tokens"] = s.dropped_tokens;
  doc["dropped_passes"] = s.dropped_passes;
  doc["pass_ids"] = s.pass_ids;
  doc["placement_versions"] = s.placement_versions;
  doc["pass_num_tokens"] = s.pass_num_tokens;
  doc["logical_count"] = detail::to_nested<std::int64_t>(
      s.logical_counts, std::array<std::int64_t, 3>{window, s.num_layers, s.num_logical_experts});
  doc["physical_count"] = detail::to_nested<std::int64_t>(
      s.physical_counts, std::array<std::int64_t, 3>{window, s.num_layers, s.num_physical_experts});
  doc["decayed_logical_load"] =
      loads_to_json(s.decayed_logical_load, {s.num_layers, s.num_logical_experts});
  doc["decayed_physical_load"] =
      loads_to_json(s.decayed_physical_load, {s.num_layers, s.num_physical_experts});
  doc["token_pass_ids"] = s.token_pass_ids;
  doc["token_placement_versions"] = s.token_placement_versions;
  const std::array<std::int64_t, 3> token_shape{tokens, s.num_layers, s.top_k};
  doc["token_physical_ids"] = detail::to_nested<std::int32_t>(s.token_physical_ids, token_shape);
  doc["token_logical_ids"] = detail::to_nested<std::int32_t>(s.token_logical_ids, token_shape);
  return detail::dump_document(doc);
}

namespace {

std::int64_t int_field(const Json& doc, std::string_view key, std::int64_t min = 0,
                       std::int64_t max = kMaxInt64) {
  return detail::read_int(detail::require_key(doc, key), key, min, max);
}

/// A 1-d list of `size` integers (kAnySize: any); `dim_name` says what it is indexed by.
std::vector<std::int64_t> int_list(const Json& doc, std::string_view key, std::int64_t size,
                                   std::string_view dim_name) {
  std::vector<std::int64_t> shape{size};
  const std::array<std::string_view, 1> names{dim_name};
  return detail::read_nested_ints(detail::require_key(doc, key), key, shape, names,
                                  std::numeric_limits<std::int64_t>::min(), kMaxInt64);
}

std::vector<std::uint64_t> uint_list(const Json& doc, std::string_view key, std::int64_t size,
                                     std::string_view dim_name) {
  std::vector<std::int64_t> shape{size};
  const std::array<std::string_view, 1> names{dim_name};
  return detail::read_nested<std::uint64_t>(detail::require_key(doc, key), key, shape, names,
                                            detail::read_uint);
}

/// An [rows][cols] load array, or [] for none.
std::vector<double> loads_field(const Json& doc, std::string_view key, std::int64_t rows,
                                std::int64_t cols, std::string_view col_name) {
  const Json& value = detail::require_key(doc, key);
  if (value.is_array() && value.empty()) return {};
  std::vector<std::int64_t> shape{rows, cols};
  const std::array<std::string_view, 2> names{"layers", col_name};
  return detail::read_nested_doubles(value, key, shape, names);
}

std::vector<std::int64_t> counts_field(const Json& doc, std::string_view key, std::int64_t window,
                                       std::int64_t layers, std::int64_t experts) {
  std::vector<std::int64_t> shape{window, layers, experts};
  const std::array<std::string_view, 3> names{"passes", "layers", "experts"};
  return detail::read_nested_ints(detail::require_key(doc, key), key, shape, names,
                                  std::numeric_limits<std::int64_t>::min(), kMaxInt64);
}

std::vector<std::int32_t> ids_field(const Json& doc, std::string_view key, std::int64_t tokens,
                                    std::int64_t layers, std::int64_t top_k) {
  std::vector<std::int64_t> shape{tokens, layers, top_k};
  const std::array<std::string_view, 3> names{"tokens", "layers", "top_k"};
  return detail::read_nested<std::int32_t>(
      detail::require_key(doc, key), key, shape, names,
      [](const Json& element, const std::string& where) {
        return std::int32_t(
            detail::read_int(element, where, std::numeric_limits<std::int32_t>::min(), kMaxInt32));
      });
}

}  // namespace

Snapshot snapshot_from_json(std::string_view text) {
  return detail::snapshot_from_document(detail::parse_json(text));
}

Snapshot detail::snapshot_from_document(const Json& doc) {
  detail::require_object(doc, "a moestat snapshot");
  const Json& format = detail::require_key(doc, "format");
  MOESTAT_CHECK(format.is_string() && format.get<std::string>() == kSnapshotFormat,
                "format is {}, expected \"{}\"", detail::describe(format), kSnapshotFormat);
  const std::int64_t version = int_field(doc, "version");
  MOESTAT_CHECK(version == kSnapshotFormatVersion,
                "unsupported snapshot document version {} (this build reads version {})", version,
                kSnapshotFormatVersion);

  Snapshot s;
  const Json& mode = detail::require_key(doc, "mode");
  MOESTAT_CHECK(mode.is_string(), "mode is {}, expected a string", detail::describe(mode));
  s.mode = parse_record_mode(mode.get<std::string>());
  const Json& approximate = detail::require_key(doc, "approximate");
  MOESTAT_CHECK(approximate.is_boolean(), "approximate is {}, expected true or false",
                detail::describe(approximate));
  s.approximate = approximate.get<bool>();
  s.num_layers = int_field(doc, "num_layers", 1, kMaxInt32);
  s.num_logical_experts = int_field(doc, "num_logical_experts", 1, kMaxInt32);
  s.num_physical_experts = int_field(doc, "num_physical_experts", s.num_logical_experts, kMaxInt32);
  s.top_k = int_field(doc, "top_k", 1, s.num_physical_experts);
  // Before any array is read: readers of the snapshot allocate [L][E] and [L][P] arrays
  // from these sizes even when the window is empty.
  check_layer_slots("snapshot", s.num_layers, s.num_physical_experts);
  s.num_passes = int_field(doc, "num_passes");
  s.dropped_ids = int_field(doc, "dropped_ids");
  s.dropped_tokens = int_field(doc, "dropped_tokens");
  // Added after version 1 was first written: absent means none were dropped.
  if (doc.contains("dropped_passes")) s.dropped_passes = int_field(doc, "dropped_passes");

  // The window size W comes from pass_ids; every other per-pass array must match it.
  s.pass_ids = int_list(doc, "pass_ids", detail::kAnySize, "passes");
  const std::int64_t window = s.window_size();
  s.placement_versions = uint_list(doc, "placement_versions", window, "passes, as pass_ids");
  s.pass_num_tokens = int_list(doc, "pass_num_tokens", window, "passes, as pass_ids");
  s.logical_counts =
      counts_field(doc, "logical_count", window, s.num_layers, s.num_logical_experts);
  s.physical_counts =
      counts_field(doc, "physical_count", window, s.num_layers, s.num_physical_experts);
  s.decayed_logical_load = loads_field(doc, "decayed_logical_load", s.num_layers,
                                       s.num_logical_experts, "logical experts");
  s.decayed_physical_load = loads_field(doc, "decayed_physical_load", s.num_layers,
                                        s.num_physical_experts, "physical experts");

  // Likewise N for the per-token arrays comes from token_pass_ids.
  s.token_pass_ids = int_list(doc, "token_pass_ids", detail::kAnySize, "tokens");
  const std::int64_t tokens = s.num_tokens();
  s.token_placement_versions =
      uint_list(doc, "token_placement_versions", tokens, "tokens, as token_pass_ids");
  s.token_physical_ids = ids_field(doc, "token_physical_ids", tokens, s.num_layers, s.top_k);
  s.token_logical_ids = ids_field(doc, "token_logical_ids", tokens, s.num_layers, s.top_k);

  // Value ranges and cross-field rules are the writer's checks, so both sides agree.
  validate_snapshot(s);
  return s;
}

}  // namespace moestat::io
