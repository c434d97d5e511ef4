// PtValue accessors and comparison.
#include <moestat/error.hpp>
#include <moestat/io/pt.hpp>

namespace moestat::io {

std::string_view pt_kind_name(PtValue::Kind kind) noexcept {
  switch (kind) {
    case PtValue::Kind::kNone:
      return "None";
    case PtValue::Kind::kBool:
      return "bool";
    case PtValue::Kind::kInt:
      return "int";
    case PtValue::Kind::kFloat:
      return "float";
    case PtValue::Kind::kStr:
      return "str";
    case PtValue::Kind::kTensor:
      return "tensor";
    case PtValue::Kind::kList:
      return "list";
    case PtValue::Kind::kTuple:
      return "tuple";
    case PtValue::Kind::kDict:
      return "dict";
  }
  return "unknown";
}

namespace {

template <typename T>
const T& get(const PtValue::Variant& value, PtValue::Kind wanted) {
  const T* found = std::get_if<T>(&value);
  MOESTAT_CHECK(found != nullptr, "expected a {}, got a {}", pt_kind_name(wanted),
                pt_kind_name(static_cast<PtValue::Kind>(value.index())));
  return *found;
}

}  // namespace

bool PtValue::as_bool() const { return get<bool>(value_, Kind::kBool); }
std::int64_t PtValue::as_int() const { return get<std::int64_t>(value_, Kind::kInt); }
double PtValue::as_float() const {
  if (kind() == Kind::kInt) return double(as_int());
  return get<double>(value_, Kind::kFloat);
}
const std::string& PtValue::as_str() const { return get<std::string>(value_, Kind::kStr); }
const HostTensor& PtValue::tensor() const { return get<HostTensor>(value_, Kind::kTensor); }
const PtList& PtValue::list() const { return get<PtList>(value_, Kind::kList); }
const PtTuple& PtValue::tuple() const { return get<PtTuple>(value_, Kind::kTuple); }
const PtDict& PtValue::dict() const { return get<PtDict>(value_, Kind::kDict); }

const PtValue* PtValue::find(std::string_view key) const noexcept {
  const auto* dict = std::get_if<PtDict>(&value_);
  if (dict == nullptr) return nullptr;
  for (const auto& [k, v] : *dict) {
    if (const auto* text = std::get_if<std::string>(&k.value_); text != nullptr && *text == key) {
      return &v;
    }
  }
  return nullptr;
}

const PtValue& PtValue::at(std::string_view key) const {
  MOESTAT_CHECK(kind() == Kind::kDict, "expected a dict with key \"{}\", got a {}", key,
                pt_kind_name(kind()));
  const PtValue* found = find(key);
  MOESTAT_CHECK(found != nullptr, "missing key \"{}\"", key);
  return *found;
}

bool operator==(const PtTuple& a, const PtTuple& b) { return a.items == b.items; }
bool operator==(const PtValue& a, const PtValue& b) { return a.value_ == b.value_; }

}  // namespace moestat::io
