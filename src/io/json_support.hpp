// Helpers shared by moestat's JSON readers and writers: parsing with moestat errors, nested
// integer/float arrays with shape checks, and the on-disk layout. Private to src/io: the
// public headers never mention nlohmann::json.
#pragma once

#include <cstdint>
#include <moestat/error.hpp>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace moestat::io::detail {

/// Documents read: objects are maps, so a document of n keys parses in O(n log n)
/// (ordered_json inserts by a linear scan: 160k keys took minutes).
using Json = nlohmann::json;
/// Documents written: keys in insertion order, so files read top-down in a fixed order.
using OrderedJson = nlohmann::ordered_json;

/// Parses `text`; moestat::Error "not valid JSON: <where and why>" otherwise. Also refused,
/// before the document is built: a NUL byte, a key twice in one object, nesting deeper than
/// 64, and a document that would take more than 16 times the text plus 1 MiB of memory.
Json parse_json(std::string_view text);
/// Parses `text` as above and lists the keys of the top-level object in document order,
/// which its map forgets.
Json parse_json(std::string_view text, std::vector<std::string>& top_level_keys);

/// Throws unless `document` is a JSON object; `what` names the expected document.
void require_object(const Json& document, std::string_view what);

/// `object[key]`; moestat::Error naming the missing key otherwise.
const Json& require_key(const Json& object, std::string_view key);

/// A short description of a JSON value for error messages: `5`, `1.5`, `"x"`, `an array`.
std::string describe(const Json& value);

/// "name[i][j]" for the element at `index` of a nested array called `name`.
std::string element_name(std::string_view name, std::span<const std::int64_t> index);

/// Integers: moestat::Error naming `where` unless `value` is an integer in [min, max].
std::int64_t read_int(const Json& value, std::string_view where, std::int64_t min,
                      std::int64_t max);
/// Unsigned 64-bit integers (placement versions).
std::uint64_t read_uint(const Json& value, std::string_view where);
/// A finite number (integers are accepted too).
double read_double(const Json& value, std::string_view where);

/// A shape entry the reader takes from the data instead of checking it.
constexpr std::int64_t kAnySize = -1;

/// Reads a nested array of `shape.size()` levels into row-major `values`.
/// `shape[d] == kAnySize` takes level d's size from the first row met and requires every other
/// row to match (ragged rows are errors); any other value must match exactly. `dim_names`
/// (same length as `shape`) name the levels in messages, e.g. {"passes", "layers", "experts"}.
/// On return `shape` holds the sizes found (a level under an empty one keeps kAnySize).
/// Elements are read with `read_element(value, where)`.
template <typename T, typename ReadElement>
std::vector<T> read_nested(const Json& value, std::string_view name,
                           std::vector<std::int64_t>& shape,
                           std::span<const std::string_view> dim_names, ReadElement read_element);

/// Integer elements in [min, max].
std::vector<std::int64_t> read_nested_ints(const Json& value, std::string_view name,
                                           std::vector<std::int64_t>& shape,
                                           std::span<const std::string_view> dim_names,
                                           std::int64_t min, std::int64_t max);
/// Finite floating-point elements.
std::vector<double> read_nested_doubles(const Json& value, std::string_view name,
                                        std::vector<std::int64_t>& shape,
                                        std::span<const std::string_view> dim_names);

/// Builds a nested JSON array of `shape` from row-major `values` (sizes must match).
template <typename T>
OrderedJson to_nested(std::span<const T> values, std::span<const std::int64_t> shape);

/// Serialises an object with one top-level key per line and one innermost array row per
/// line, so large count files stay readable and diffable; ends with a newline.
std::string dump_document(const OrderedJson& document);

/// How many levels of arrays `value` nests, following first elements ([[1]] -> 2).
int nesting_depth(const Json& value);

// ---- template definitions ----

namespace internal {

/// Depth-first reader behind read_nested; `index` is the position being read.
template <typename T, typename ReadElement>
void read_level(const Json& value, std::string_view name, std::vector<std::int64_t>& shape,
                const std::vector<bool>& inferred, std::span<const std::string_view> dim_names,
                std::vector<std::int64_t>& index, ReadElement& read_element, std::vector<T>& out) {
  const std::size_t depth = index.size();
  if (depth == shape.size()) {
    if (value.is_array()) {
      MOESTAT_CHECK(false, "{} is an array, but {} has {} levels of nesting ({})",
                    element_name(name, index), name, shape.size(), fmt::join(dim_names, " x "));
    }
    out.push_back(read_element(value, element_name(name, index)));
    return;
  }
  MOESTAT_CHECK(value.is_array(), "{} is {}, but {} has {} levels of nesting ({})",
                element_name(name, index), describe(value), name, shape.size(),
                fmt::join(dim_names, " x "));
  const auto size = std::int64_t(value.size());
  if (shape[depth] == kAnySize) shape[depth] = size;
  if (size != shape[depth]) {
    MOESTAT_CHECK(!inferred[depth],
                  "ragged rows: {} has {} entries, but earlier rows at that level have {} ({})",
                  element_name(name, index), size, shape[depth], dim_names[depth]);
    MOESTAT_FAIL("{} has {} entries, expected {} ({})", element_name(name, index), size,
                 shape[depth], dim_names[depth]);
  }
  index.push_back(0);
  for (const Json& child : value) {
    read_level(child, name, shape, inferred, dim_names, index, read_element, out);
    ++index.back();
  }
  index.pop_back();
}

}  // namespace internal

template <typename T, typename ReadElement>
std::vector<T> read_nested(const Json& value, std::string_view name,
                           std::vector<std::int64_t>& shape,
                           std::span<const std::string_view> dim_names, ReadElement read_element) {
  std::vector<bool> inferred(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) inferred[d] = shape[d] == kAnySize;
  std::vector<T> out;
  std::vector<std::int64_t> index;
  index.reserve(shape.size());
  internal::read_level(value, name, shape, inferred, dim_names, index, read_element, out);
  return out;
}

template <typename T>
OrderedJson to_nested(std::span<const T> values, std::span<const std::int64_t> shape) {
  std::int64_t expected = 1;
  for (std::int64_t size : shape) expected *= size;
  MOESTAT_CHECK(std::int64_t(values.size()) == expected,
                "internal: {} values do not fill shape [{}]", values.size(),
                fmt::join(shape, ", "));
  if (shape.size() == 1) return OrderedJson(std::vector<T>(values.begin(), values.end()));
  OrderedJson out = OrderedJson::array();
  if (shape.empty()) return out;
  const auto rows = std::size_t(shape[0]);
  const std::size_t row_size = rows == 0 ? 0 : values.size() / rows;
  out.get_ref<OrderedJson::array_t&>().reserve(rows);
  for (std::size_t row = 0; row < rows; ++row) {
    out.push_back(to_nested(values.subspan(row * row_size, row_size), shape.subspan(1)));
  }
  return out;
}

}  // namespace moestat::io::detail
