// Statistics in JSON: the one place that lays named tensors out as moestat's JSON
// documents. A document is an object whose keys are the tensors' names and whose values
// are nested arrays ({"logical_count": [[...]]}, {"physical_to_logical_map": [[...]]},
// {"gpu_experts_masks": [[true, ...]]}); metadata is not written, since SGLang passes the
// keys of a placement file to its engine as arguments. A moestat snapshot document holds
// counts: its window, with what it says of each pass.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <moestat/error.hpp>
#include <moestat/io/counts_json.hpp>
#include <moestat/io/placement_json.hpp>
#include <moestat/io/read_bounds.hpp>

#include "codec.hpp"
#include "json_support.hpp"
#include "readers.hpp"

namespace moestat::io {
namespace detail {
namespace {

/// "[layers][experts]".
std::string shape_text(std::span<const Level> levels) {
  std::string out;
  for (const Level& level : levels) out += fmt::format("[{}]", level.plural);
  return out;
}

/// The shapes `form` may take, shallowest first: "[layers][experts] or [passes][layers]...".
/// With `depths`, each followed by its depth: "[layers][experts] (2) or ...".
std::string shapes_text(const TensorForm& form, bool depths) {
  std::vector<std::string> shapes;
  for (std::size_t dims = form.levels.size() - form.optional_levels; dims <= form.levels.size();
       ++dims) {
    const std::string shape = shape_text(form.levels.subspan(form.levels.size() - dims));
    shapes.push_back(depths ? fmt::format("{} ({})", shape, dims) : shape);
  }
  return fmt::format("{}", fmt::join(shapes, " or "));
}

/// A count element: whole numbers as int64 (SGLang's published statistics write "12.0");
/// a non-whole one sets `fractional`, and the caller reads the array again as doubles.
std::int64_t count_element(const Json& element, const std::string& where, bool& fractional) {
  if (element.is_number_float()) {
    const double number = element.get<double>();
    constexpr double kLimit = 9223372036854775808.0;  // 2^63
    if (std::trunc(number) == number && number >= -kLimit && number < kLimit) {
      return std::int64_t(number);
    }
    fractional = true;  // the payload's mapping says whether it takes fractions
    return 0;
  }
  return read_int(element, where, std::numeric_limits<std::int64_t>::min(),
                  std::numeric_limits<std::int64_t>::max());
}

/// An empty inner level leaves a size unknown (kAnySize) or zero; both are errors.
void require_no_empty_row(std::string_view name, std::span<const Level> levels,
                          std::span<const std::int64_t> shape) {
  if (std::any_of(shape.begin(), shape.end(), [](std::int64_t size) { return size <= 0; })) {
    std::vector<std::string_view> singular;
    for (const Level& level : levels) singular.push_back(level.singular);
    MOESTAT_FAIL("{} has an empty row: expected at least one {}", name,
                 fmt::join(singular, " and at least one "));
  }
}

/// The tensor `value` spells out as `form` (named `name`), each element checked as the
/// form's kind of element, so messages name the element ("logical_count[0][1] is \"x\"").
HostTensor tensor_of(const Json& value, const TensorForm& form, bool several_shapes) {
  const std::string_view name = form.name;
  MOESTAT_CHECK(!(value.is_array() && value.empty()), "{} is empty: expected {}", name,
                shapes_text(form, false));
  std::size_t dims = form.levels.size();
  if (several_shapes) {
    // The depth picks the shape, so it is checked first and named with the shapes allowed;
    // a payload of one shape is read at that depth, naming the element that breaks it.
    const auto depth = std::size_t(nesting_depth(value));
    MOESTAT_CHECK(depth >= dims - form.optional_levels && depth <= dims,
                  "{} has {} levels of nesting, expected {}", name, depth, shapes_text(form, true));
    dims = depth;
  }
  const std::span<const Level> levels = form.levels.subspan(form.levels.size() - dims);
  std::vector<std::string_view> level_names;
  for (const Level& level : levels) level_names.push_back(level.plural);
  std::vector<std::int64_t> shape(dims, kAnySize);
  HostTensor out;
  switch (form.element) {
    case Element::kFlag: {
      const auto flags = read_nested<std::uint8_t>(
          value, name, shape, level_names, [](const Json& element, const std::string& where) {
            MOESTAT_CHECK(element.is_boolean(), "{} is {}, expected true or false", where,
                          describe(element));
            return std::uint8_t(element.get<bool>() ? 1 : 0);
          });
      out = HostTensor::of<std::uint8_t>(shape, flags);
      break;
    }
    case Element::kId:
      out = HostTensor::of<std::int64_t>(
          shape, read_nested_ints(value, name, shape, level_names, 0,
                                  std::numeric_limits<std::int32_t>::max() - 1));
      break;
    case Element::kCount: {
      bool fractional = false;
      const auto counts = read_nested<std::int64_t>(
          value, name, shape, level_names, [&](const Json& element, const std::string& where) {
            return count_element(element, where, fractional);
          });
      if (!fractional) {
        out = HostTensor::of<std::int64_t>(shape, counts);
        break;
      }
      shape.assign(dims, kAnySize);
      out = HostTensor::of<double>(shape, read_nested_doubles(value, name, shape, level_names));
      break;
    }
  }
  require_no_empty_row(name, levels, shape);
  return out;
}

/// The named tensors of a document: those of `wanted`'s forms (the first it holds; other
/// keys are left unread), or a snapshot's window.
NamedTensors tensors_of_document(const Json& document, const PayloadMapping& wanted) {
  std::vector<std::string> names;
  for (const TensorForm& form : wanted.forms) names.push_back(fmt::format("\"{}\"", form.name));
  require_object(document, fmt::format("a document with {}", fmt::join(names, " or ")));
  if (document.contains("format")) {
    return window_tensors(count_window_of(snapshot_from_document(document)));
  }
  const auto has = [&](std::string_view name) { return document.contains(name); };
  const TensorForm* form = form_held(wanted, has);
  if (form == nullptr) {
    for (const PayloadMapping* other : payload_mappings()) {
      if (const TensorForm* held = form_held(*other, has)) {
        MOESTAT_FAIL("missing key \"{}\": the document holds \"{}\", a {}",
                     wanted.forms.front().name, held->name, statistics_kind_name(other->kind));
      }
    }
    require_key(document, wanted.forms.front().name);  // says it is missing
  }
  const bool several_shapes = wanted.forms.size() > 1 || form->optional_levels > 0;
  NamedTensors out;
  out.tensors.emplace_back(form->name,
                           tensor_of(document.at(std::string(form->name)), *form, several_shapes));
  return out;
}

/// The sizes `options` require of `form`'s tensor (kAnySize where any will do): a placement's
/// [layers, physical slots] when the reader knows the model's.
std::vector<std::int64_t> required_shape(const PayloadMapping& wanted, const ReadOptions& options) {
  std::vector<std::int64_t> shape(wanted.forms.front().levels.size(), kAnySize);
  if (wanted.kind == StatisticsKind::kPlacement) {
    if (options.num_layers > 0) shape[0] = options.num_layers;
    if (options.num_physical_experts > 0) shape[1] = options.num_physical_experts;
  }
  return shape;
}

/// Reads a document's tensor of ids (Element::kId, every level required) as nlohmann's SAX
/// parse meets it, each id straight into the tensor: the document built first took 16 bytes
/// an id, and naming every element as it was read ten seconds for a 32 MiB map. Each row's
/// size is checked as the row grows, so a map of another shape than the one required is
/// refused at the first id too many. The parse stops (sax_parse returns false) where the
/// document is not the plain {"name": [[...]], ...} this reads: not an object, a snapshot
/// ("format"), a syntax error; the caller then reads it as a document, which says why.
class StreamedIds final : public nlohmann::json_sax<Json> {
 public:
  StreamedIds(const TensorForm& form, std::vector<std::int64_t> required)
      : form_(form), shape_(std::move(required)) {
    for (const std::int64_t size : shape_) inferred_.push_back(size == kAnySize);
  }

  bool found() const { return found_; }
  /// The tensor read; moestat::Error where a level is empty.
  HostTensor tensor() const {
    MOESTAT_CHECK(shape_[0] != 0, "{} is empty: expected {}", form_.name,
                  shapes_text(form_, false));
    require_no_empty_row(form_.name, form_.levels, shape_);
    return HostTensor::of<std::int32_t>(shape_, ids_);
  }

  bool null() override { return scalar(Json(nullptr)); }
  bool boolean(bool value) override { return scalar(Json(value)); }
  bool number_integer(number_integer_t value) override {
    return !in_tensor() || id(value < 0 ? -1 : value, Json(value));
  }
  bool number_unsigned(number_unsigned_t value) override {
    constexpr auto kMax = std::uint64_t(std::numeric_limits<std::int32_t>::max());
    return !in_tensor() || id(value > kMax ? -1 : std::int64_t(value), Json(value));
  }
  bool number_float(number_float_t value, const string_t&) override { return scalar(Json(value)); }
  bool string(string_t& value) override { return scalar(Json(value)); }
  bool binary(binary_t&) override { return scalar(Json::binary({})); }
  bool start_object(std::size_t) override {
    if (in_tensor()) element(Json::object());
    ++depth_;
    return true;
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool key(string_t& name) override {
    if (depth_ != 1) return true;
    if (name == "format") return false;  // a snapshot: read as a document
    reading_ = name == form_.name;
    if (reading_ && found_) return false;  // the key twice: read as a document, which says so
    found_ = found_ || reading_;
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth_ == 0) return false;  // not an object: read as a document
    ++depth_;
    if (!in_tensor()) return true;
    if (!index_.empty()) {
      if (index_.size() == levels()) element(Json::array());  // where an id goes
      count_child(index_.size() - 1);
    }
    index_.push_back(0);
    return true;
  }
  bool end_array() override {
    --depth_;
    if (!in_tensor()) return true;
    const std::size_t level = index_.size() - 1;
    if (index_[level] < shape_[level]) wrong_size(level, fmt::format("{}", index_[level]));
    shape_[level] = index_[level];
    index_.pop_back();
    if (index_.empty()) {
      reading_ = false;
    } else {
      ++index_.back();  // the row just read, named by its index while it was read
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  /// Inside the tensor's value (its arrays, or the value itself just after its key).
  bool in_tensor() const { return reading_ && depth_ >= 1; }
  std::size_t levels() const { return form_.levels.size(); }

  /// An element of the tensor other than an integer: refused, as the document reader does.
  bool scalar(const Json& value) {
    if (in_tensor()) element(value);
    return true;
  }
  /// The next element of the innermost open level: counted, and checked against that level's
  /// size; `value` (what the document holds there) must be an id at the innermost level and
  /// an array above it.
  [[noreturn]] void element(const Json& value) const {
    const std::string where = element_name(form_.name, index_);
    if (index_.size() < levels() || value.is_array()) {
      MOESTAT_FAIL("{} is {}, but {} has {} levels of nesting ({})", where,
                   value.is_array() ? "an array" : describe(value), form_.name, levels(),
                   level_names());
    }
    MOESTAT_FAIL("{} is {}, expected an integer", where, describe(value));
  }
  /// An id (-1 for one out of range) at the innermost level; `value` names it in messages.
  bool id(std::int64_t id, const Json& value) {
    if (index_.size() < levels()) element(value);
    const std::size_t level = index_.size() - 1;
    count_child(level);
    constexpr std::int64_t kMaxId = std::numeric_limits<std::int32_t>::max() - 1;
    if (id < 0 || id > kMaxId) {
      MOESTAT_FAIL("{} is {}, expected an integer in [0, {}]", element_name(form_.name, index_),
                   describe(value), kMaxId);
    }
    ids_.push_back(std::int32_t(id));
    ++index_[level];
    return true;
  }
  /// A row or id begins at `level`: refused when that level already holds all it may.
  void count_child(std::size_t level) const {
    if (shape_[level] != kAnySize && index_[level] >= shape_[level]) {
      wrong_size(level, fmt::format("more than {}", shape_[level]));
    }
  }
  /// The row being read at `level` has `count` entries where its size is known otherwise.
  [[noreturn]] void wrong_size(std::size_t level, const std::string& count) const {
    const std::vector<std::int64_t> row(index_.begin(), index_.begin() + std::ptrdiff_t(level));
    const std::string where = element_name(form_.name, row);
    if (inferred_[level]) {
      MOESTAT_FAIL("ragged rows: {} has {} entries, but earlier rows at that level have {} ({})",
                   where, count, shape_[level], form_.levels[level].plural);
    }
    MOESTAT_FAIL("{} has {} entries, expected {} ({})", where, count, shape_[level],
                 form_.levels[level].plural);
  }
  std::string level_names() const {
    std::vector<std::string_view> names;
    for (const Level& level : form_.levels) names.push_back(level.plural);
    return fmt::format("{}", fmt::join(names, " x "));
  }

  const TensorForm& form_;
  std::vector<std::int64_t> shape_;
  std::vector<bool> inferred_;
  std::vector<std::int64_t> index_;  ///< the position in each open level of the tensor
  std::vector<std::int32_t> ids_;
  int depth_ = 0;         ///< arrays and objects open
  bool reading_ = false;  ///< the value of the tensor's key is being read
  bool found_ = false;
};

OrderedJson nested_of(const HostTensor& tensor) {
  switch (tensor.dtype) {
    case DType::kBool: {
      const std::vector<std::uint8_t> flags = tensor.values<std::uint8_t>();
      const auto bools = std::make_unique<bool[]>(flags.size());
      std::copy(flags.begin(), flags.end(), bools.get());
      return to_nested<bool>(std::span<const bool>(bools.get(), flags.size()), tensor.shape);
    }
    case DType::kFloat32: {
      const std::vector<float> narrow = tensor.values<float>();
      return to_nested<double>(std::vector<double>(narrow.begin(), narrow.end()), tensor.shape);
    }
    case DType::kFloat64:
      return to_nested<double>(tensor.values<double>(), tensor.shape);
    default:
      return to_nested<std::int64_t>(tensor.to_int64(), tensor.shape);
  }
}

/// The document of named tensors: one key per tensor, in their order.
std::string document_of(const NamedTensors& tensors) {
  OrderedJson document = OrderedJson::object();
  for (const auto& [name, tensor] : tensors.tensors) document[name] = nested_of(tensor);
  return dump_document(document);
}

class JsonCodec final : public TensorContainerCodec {
  /// JSON has no signature: any text may be JSON.
  bool has_signature(std::string_view) const override { return false; }
  /// JSON text starts with an object or array (after an optional UTF-8 byte-order mark and
  /// white space); moestat's JSON files are all objects.
  bool starts_like(std::string_view bytes) const override {
    if (bytes.starts_with("\xef\xbb\xbf")) bytes.remove_prefix(3);
    const std::size_t first = bytes.find_first_not_of(" \t\r\n");
    return first != std::string_view::npos && (bytes[first] == '{' || bytes[first] == '[');
  }
  std::string_view container_name() const noexcept override { return "JSON"; }
  NamedTensors decode(std::string_view bytes, std::string_view, const PayloadMapping& wanted,
                      const ReadOptions& options) const override {
    if (const TensorForm& form = wanted.forms.front();
        wanted.forms.size() == 1 && form.element == Element::kId && form.optional_levels == 0) {
      // The stream first, so that a map of another shape is refused before the rest of the
      // text is read; what parse_json refuses (a key twice, nesting, memory) before the map
      // is used. The stream holds no more than the ids, so it needs no bound of its own.
      StreamedIds stream(form, required_shape(wanted, options));
      if (Json::sax_parse(bytes, &stream) && stream.found()) {
        check_json(bytes);
        NamedTensors out;
        out.tensors.emplace_back(form.name, stream.tensor());
        return out;
      }
    }
    return tensors_of_document(parse_json(bytes), wanted);
  }
  std::string encode(const NamedTensors& tensors) const override { return document_of(tensors); }
};

}  // namespace

const Codec& json_codec() {
  static const JsonCodec codec;
  return codec;
}

bool holds_payload(const Json& document, const PayloadMapping& mapping) {
  return form_held(mapping, [&](std::string_view name) { return document.contains(name); }) !=
         nullptr;
}

StatisticsFile payload_from_document(const Json& document, const PayloadMapping& mapping,
                                     const ReadOptions& options) {
  return payload_from_tensors(mapping, tensors_of_document(document, mapping), options, "JSON");
}

}  // namespace detail

std::string logical_counts_to_json(const CountWindow& counts) {
  return detail::json_codec().write(counts);
}

std::string logical_counts_to_json(const CountWindow& counts, std::string_view members) {
  check_json(members);
  const detail::OrderedJson extra =
      detail::OrderedJson::parse(members, nullptr, /*allow_exceptions=*/false);
  MOESTAT_CHECK(extra.is_object(), "counts metadata: expected a JSON object, got {}",
                extra.is_discarded() ? "text that is not JSON" : extra.type_name());
  detail::OrderedJson document = detail::OrderedJson::object();
  const StatisticsFile file = counts;
  for (const auto& [name, tensor] :
       detail::payload_mapping(StatisticsKind::kLogicalCounts).to_tensors(file).tensors) {
    document[name] = detail::nested_of(tensor);
  }
  for (const auto& [key, value] : extra.items()) {
    MOESTAT_CHECK(!document.contains(key), "counts metadata: {} is the counts' own key", key);
    document[key] = value;
  }
  return detail::dump_document(document);
}

CountWindow logical_counts_from_json(std::string_view text, Fractions fractions) {
  return std::get<CountWindow>(detail::payload_from_document(
      detail::parse_json(text), detail::kCountsMapping, {.fractions = fractions}));
}

std::string placement_to_json(const Placement& placement) {
  return detail::json_codec().write(placement);
}

Placement placement_from_json(std::string_view text, std::int64_t num_logical_experts,
                              std::uint64_t version) {
  return std::get<Placement>(
      detail::json_codec().read(text, "", StatisticsKind::kPlacement,
                                {.num_logical_experts = num_logical_experts, .version = version}));
}

}  // namespace moestat::io
