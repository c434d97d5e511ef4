#include "json_support.hpp"

#include <cmath>
#include <limits>
#include <moestat/io/read_bounds.hpp>
#include <set>

#include "read_budget.hpp"

namespace moestat::io::detail {

namespace {

// Bounds on a JSON text, checked before nlohmann builds it (docs/formats.md, "Bounds on hostile
// files"): nesting (moestat's documents nest at most 4 deep; the .pt reader's bound), and the
// memory of the document built, at most 16 times the text plus 1 MiB, as for .pt files.
constexpr int kMaxDepth = 64;
// What the document holds of each, charged as the scan meets it: a value, the heap string of
// a string value, an object or array, and an object's member (a map node with its key). The
// per-object set of keys (duplicates) is charged as a member again.
constexpr std::uint64_t kValueBytes = sizeof(Json);
constexpr std::uint64_t kStringBytes = 32;
constexpr std::uint64_t kContainerBytes = 64;
constexpr std::uint64_t kMemberBytes = 80;

/// A SAX scan of the text before the document is built: refuses what nlohmann would accept
/// but the reference readers refuse (a key twice in one object, where Python keeps the last
/// value and Rust's serde refuses) and what would cost memory out of proportion (nesting
/// beyond kMaxDepth, a document beyond the budget), and lists the top-level keys in document
/// order (a map forgets it). A syntax error ends the scan quietly: the parse that follows
/// says where and why. (A parser callback could do this in the DOM parse, but nlohmann's
/// callback parser scans an object's members at the end of each child: quadratic.)
class JsonGuard : public nlohmann::json_sax<Json> {
 public:
  JsonGuard(std::uint64_t text_bytes, std::vector<std::string>* top_level_keys)
      : budget_(text_bytes, kReadExpansion), top_level_keys_(top_level_keys) {}

  bool null() override { return value(0); }
  bool boolean(bool) override { return value(0); }
  bool number_integer(number_integer_t) override { return value(0); }
  bool number_unsigned(number_unsigned_t) override { return value(0); }
  bool number_float(number_float_t, const string_t&) override { return value(0); }
  bool string(string_t& text) override { return value(kStringBytes + text.size()); }
  bool binary(binary_t&) override { return value(0); }
  bool start_object(std::size_t) override { return open(true); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_array() override { return close(); }
  bool key(string_t& name) override {
    budget_.spend(2 * (kMemberBytes + name.size()), "the JSON document");
    std::set<std::string>& keys = objects_.back();
    MOESTAT_CHECK(keys.insert(name).second,
                  "not valid JSON here: the key \"{}\" appears twice in one object (one reader "
                  "would take the first value, another the last)",
                  name);
    if (top_level_keys_ != nullptr && depth_ == 1) top_level_keys_->push_back(name);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool value(std::uint64_t heap_bytes) {
    budget_.spend(kValueBytes + heap_bytes, "the JSON document");
    return true;
  }
  bool open(bool object) {
    MOESTAT_CHECK(++depth_ <= kMaxDepth,
                  "not valid JSON here: arrays and objects nested more than {} deep", kMaxDepth);
    budget_.spend(kValueBytes + kContainerBytes, "the JSON document");
    if (object) objects_.emplace_back();
    is_object_.push_back(object);
    return true;
  }
  bool close() {
    --depth_;
    if (is_object_.back()) objects_.pop_back();
    is_object_.pop_back();
    return true;
  }

  ReadBudget budget_;
  std::vector<std::string>* top_level_keys_;
  int depth_ = 0;
  std::vector<bool> is_object_;                 ///< per open container: an object?
  std::vector<std::set<std::string>> objects_;  ///< the keys of each open object
};

/// The checks of JsonGuard, and a NUL byte.
void scan_checked(std::string_view text, std::vector<std::string>* top_level_keys) {
  // A NUL is not JSON anywhere (strings escape it), but would end nlohmann's input early.
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos) {
    MOESTAT_FAIL("not valid JSON: a NUL byte at offset {}", nul);
  }
  JsonGuard guard(text.size(), top_level_keys);
  Json::sax_parse(text, &guard);
}

Json parse_checked(std::string_view text, std::vector<std::string>* top_level_keys) {
  scan_checked(text, top_level_keys);
  try {
    return Json::parse(text);
  } catch (const Json::exception& error) {
    // nlohmann prefixes "[json.exception.parse_error.101] "; the rest says where and why.
    std::string_view why = error.what();
    if (const auto end = why.find("] "); why.starts_with("[json.exception") && end != why.npos) {
      why.remove_prefix(end + 2);
    }
    MOESTAT_FAIL("not valid JSON: {}", why);
  }
}

}  // namespace

Json parse_json(std::string_view text) { return parse_checked(text, nullptr); }

Json parse_json(std::string_view text, std::vector<std::string>& top_level_keys) {
  return parse_checked(text, &top_level_keys);
}

void require_object(const Json& document, std::string_view what) {
  MOESTAT_CHECK(document.is_object(), "expected a JSON object ({}) at the top level, got {}", what,
                describe(document));
}

const Json& require_key(const Json& object, std::string_view key) {
  const auto found = object.find(key);
  MOESTAT_CHECK(found != object.end(), "missing key \"{}\"", key);
  return *found;
}

std::string describe(const Json& value) {
  switch (value.type()) {
    case Json::value_t::array:
      return value.empty() ? "an empty array" : "an array";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::null:
      return "null";
    case Json::value_t::string: {
      std::string text = value.dump();
      if (text.size() > 40) text = text.substr(0, 37) + "...";
      return text;
    }
    default:
      return value.dump();
  }
}

std::string element_name(std::string_view name, std::span<const std::int64_t> index) {
  std::string out(name);
  for (std::int64_t i : index) out += fmt::format("[{}]", i);
  return out;
}

std::int64_t read_int(const Json& value, std::string_view where, std::int64_t min,
                      std::int64_t max) {
  MOESTAT_CHECK(value.is_number_integer(), "{} is {}, expected an integer", where, describe(value));
  // nlohmann stores non-negative integers as unsigned; those above int64's range are too big.
  const bool too_big =
      value.is_number_unsigned() &&
      value.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max());
  const std::int64_t number =
      too_big ? std::numeric_limits<std::int64_t>::max() : value.get<std::int64_t>();
  if (too_big || number < min || number > max) {
    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
    if (max == kMax && min == 0) {
      MOESTAT_FAIL("{} is {}, expected a non-negative integer", where, describe(value));
    }
    if (max == kMax)
      MOESTAT_FAIL("{} is {}, expected an integer >= {}", where, describe(value), min);
    MOESTAT_FAIL("{} is {}, expected an integer in [{}, {}]", where, describe(value), min, max);
  }
  return number;
}

std::uint64_t read_uint(const Json& value, std::string_view where) {
  MOESTAT_CHECK(value.is_number_unsigned(), "{} is {}, expected a non-negative integer", where,
                describe(value));
  return value.get<std::uint64_t>();
}

double read_double(const Json& value, std::string_view where) {
  MOESTAT_CHECK(value.is_number(), "{} is {}, expected a number", where, describe(value));
  const double number = value.get<double>();
  MOESTAT_CHECK(std::isfinite(number), "{} is {}, expected a finite number", where, number);
  return number;
}

std::vector<std::int64_t> read_nested_ints(const Json& value, std::string_view name,
                                           std::vector<std::int64_t>& shape,
                                           std::span<const std::string_view> dim_names,
                                           std::int64_t min, std::int64_t max) {
  return read_nested<std::int64_t>(value, name, shape, dim_names,
                                   [min, max](const Json& element, const std::string& where) {
                                     return read_int(element, where, min, max);
                                   });
}

std::vector<double> read_nested_doubles(const Json& value, std::string_view name,
                                        std::vector<std::int64_t>& shape,
                                        std::span<const std::string_view> dim_names) {
  return read_nested<double>(
      value, name, shape, dim_names,
      [](const Json& element, const std::string& where) { return read_double(element, where); });
}

int nesting_depth(const Json& value) {
  int depth = 0;
  for (const Json* level = &value; level->is_array(); level = &level->front()) {
    ++depth;
    if (level->empty()) break;
  }
  return depth;
}

namespace {

void dump_value(const OrderedJson& value, int indent, std::string& out) {
  // Arrays of arrays get one child per line; everything else is compact.
  if (value.is_array() && !value.empty() && value.front().is_array()) {
    out += "[\n";
    const std::string pad(std::size_t(indent + 2), ' ');
    for (std::size_t i = 0; i < value.size(); ++i) {
      out += pad;
      dump_value(value[i], indent + 2, out);
      out += i + 1 < value.size() ? ",\n" : "\n";
    }
    out.append(std::size_t(indent), ' ');
    out += ']';
  } else {
    out += value.dump();
  }
}

}  // namespace

std::string dump_document(const OrderedJson& document) {
  std::string out = "{\n";
  std::size_t remaining = document.size();
  for (const auto& [key, value] : document.items()) {
    out += "  ";
    out += OrderedJson(key).dump();
    out += ": ";
    dump_value(value, 2, out);
    out += --remaining > 0 ? ",\n" : "\n";
  }
  out += "}\n";
  return out;
}

}  // namespace moestat::io::detail

namespace moestat::io {

void check_json(std::string_view text) { detail::scan_checked(text, nullptr); }

}  // namespace moestat::io
