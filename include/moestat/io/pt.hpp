// torch `.pt` files (what torch.save writes) without libtorch: a value model, a reader and a
// writer. Layout in docs/formats.md.
//
//   io::PtValue dump = io::read_pt_file("expert_distribution_recorder_1730000000.0.pt");
//   const io::HostTensor& counts = dump.at("logical_count").tensor();   // [W, L, E] int32
//   io::write_pt_file("counts.pt", dump);   // loads with torch.load(path, weights_only=True)
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <moestat/io/host_tensor.hpp>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace moestat::io {

class PtValue;
/// A Python list.
using PtList = std::vector<PtValue>;
/// A Python tuple (kept apart from lists: torch and SGLang use both).
struct PtTuple {
  std::vector<PtValue> items;
  friend bool operator==(const PtTuple&, const PtTuple&);
};
/// A Python dict, in insertion order (as Python keeps it). Keys are str or int.
using PtDict = std::vector<std::pair<PtValue, PtValue>>;

/// One Python value of the subset torch.save files use: None, bool, int (64-bit), float,
/// str, tensor, list, tuple, dict.
class PtValue {
 public:
  using Variant = std::variant<std::monostate, bool, std::int64_t, double, std::string, HostTensor,
                               PtList, PtTuple, PtDict>;
  enum class Kind : std::uint8_t {
    kNone,
    kBool,
    kInt,
    kFloat,
    kStr,
    kTensor,
    kList,
    kTuple,
    kDict
  };

  PtValue() = default;  ///< None.
  PtValue(bool value) : value_(value) {}
  PtValue(int value) : value_(std::int64_t(value)) {}
  PtValue(std::int64_t value) : value_(value) {}
  PtValue(double value) : value_(value) {}
  PtValue(const char* value) : value_(std::string(value)) {}
  PtValue(std::string value) : value_(std::move(value)) {}
  PtValue(HostTensor value) : value_(std::move(value)) {}
  PtValue(PtList value) : value_(std::move(value)) {}
  PtValue(PtTuple value) : value_(std::move(value)) {}
  PtValue(PtDict value) : value_(std::move(value)) {}

  Kind kind() const noexcept { return static_cast<Kind>(value_.index()); }
  const Variant& variant() const noexcept { return value_; }
  bool is_none() const noexcept { return kind() == Kind::kNone; }

  // Typed access; moestat::Error naming the expected and actual kind on a mismatch.
  bool as_bool() const;
  std::int64_t as_int() const;
  double as_float() const;  ///< A float, or an int converted.
  const std::string& as_str() const;
  const HostTensor& tensor() const;
  const PtList& list() const;
  const PtTuple& tuple() const;
  const PtDict& dict() const;

  /// The value under str key `key` of a dict, or nullptr when absent (or not a dict).
  const PtValue* find(std::string_view key) const noexcept;
  /// Like find, but moestat::Error "missing key" when absent.
  const PtValue& at(std::string_view key) const;

  friend bool operator==(const PtValue&, const PtValue&);

 private:
  Variant value_;
};

/// "None", "bool", "int", "float", "str", "tensor", "list", "tuple" or "dict".
std::string_view pt_kind_name(PtValue::Kind kind) noexcept;

/// Bounds on what a reader allocates, so a hostile file cannot make it allocate more than
/// a small multiple of its own size or recurse without end.
struct PtReadLimits {
  std::size_t max_depth = 64;  ///< Nesting of lists, tuples and dicts.
  std::uint64_t max_pickle_bytes = std::uint64_t(64) << 20;  ///< Size of data.pkl.
  /// Memory a read may take beyond the file's bytes, as a multiple of the file size (plus
  /// 1 MiB): data.pkl, the objects the pickle builds, every storage loaded, and the result
  /// (a shared object counts at every reference).
  std::uint64_t max_expansion = 16;
};

/// Parses the bytes of a .pt file. `name` prefixes every error message ("NAME: ...").
/// Refuses (moestat::Error) anything outside the subset: other pickle opcodes, other
/// globals (only torch._utils._rebuild_tensor_v2, collections.OrderedDict and the
/// Int/Long/Float/Double/Bool storage classes are known), other dtypes, non-zip files
/// (legacy torch.save format), compressed records it would have to inflate beyond bounds.
PtValue read_pt(std::span<const std::byte> bytes, std::string_view name = "<memory>",
                const PtReadLimits& limits = {});
/// Reads a file as read_pt; errors start with the path.
PtValue read_pt_file(const std::filesystem::path& path, const PtReadLimits& limits = {});

/// The bytes of a .pt file holding `value`, as torch.save lays them out: a zip (stored, not
/// compressed) of `archive/data.pkl` (pickle protocol 2), `archive/data/N` (one storage per
/// tensor), `archive/byteorder` and `archive/version`. Tensors keep their `device` as the
/// storage location, so torch.load needs map_location for a "cuda:N" tensor on a machine
/// without that GPU. moestat::Error on a tensor whose data size does not match its shape,
/// or a dict key other than str or int.
std::string pt_to_bytes(const PtValue& value);
/// Writes pt_to_bytes(value) atomically (temporary file, fsync, rename).
void write_pt_file(const std::filesystem::path& path, const PtValue& value);

}  // namespace moestat::io
