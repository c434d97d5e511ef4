// Describing .pt values and tensors in a line each.
#include "describe_value.hpp"

#include <fmt/format.h>

#include <moestat/printable.hpp>

namespace moestat::cli {
namespace {

std::string key_text(const io::PtValue& key) {
  // Keys and strings are the file's bytes: escaped, so a key cannot drive the terminal.
  return key.kind() == io::PtValue::Kind::kStr ? fmt::format("[\"{}\"]", printable(key.as_str()))
                                               : fmt::format("[{}]", key.as_int());
}

void walk(const io::PtValue& value, const std::string& path, std::size_t limit,
          std::vector<std::pair<std::string, std::string>>& out) {
  if (out.size() >= limit) return;
  out.emplace_back(path.empty() ? "(top)" : path, describe(value));
  if (const auto* dict = std::get_if<io::PtDict>(&value.variant())) {
    for (const auto& [key, item] : *dict) walk(item, path + key_text(key), limit, out);
  } else if (value.kind() == io::PtValue::Kind::kList ||
             value.kind() == io::PtValue::Kind::kTuple) {
    const auto& items =
        value.kind() == io::PtValue::Kind::kList ? value.list() : value.tuple().items;
    for (std::size_t i = 0; i < items.size(); ++i) {
      walk(items[i], fmt::format("{}[{}]", path, i), limit, out);
    }
  }
}

}  // namespace

std::string describe(const io::HostTensor& tensor) {
  return fmt::format("tensor {} [{}] on {}", dtype_name(tensor.dtype),
                     fmt::join(tensor.shape, ", "), io::device_name(tensor.device));
}

std::string describe(const io::PtValue& value) {
  using Kind = io::PtValue::Kind;
  switch (value.kind()) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return value.as_bool() ? "bool True" : "bool False";
    case Kind::kInt:
      return fmt::format("int {}", value.as_int());
    case Kind::kFloat:
      return fmt::format("float {}", value.as_float());
    case Kind::kStr: {
      const std::string& text = value.as_str();
      return text.size() <= 40 ? fmt::format("str \"{}\"", printable(text))
                               : fmt::format("str of {} bytes", text.size());
    }
    case Kind::kTensor:
      return describe(value.tensor());
    case Kind::kList:
      return fmt::format("list of {}", value.list().size());
    case Kind::kTuple:
      return fmt::format("tuple of {}", value.tuple().items.size());
    case Kind::kDict:
      return fmt::format("dict of {} keys", value.dict().size());
  }
  return "?";
}

std::vector<std::pair<std::string, std::string>> describe_tree(const io::PtValue& value,
                                                               std::size_t limit) {
  std::vector<std::pair<std::string, std::string>> out;
  walk(value, "", limit, out);
  return out;
}

}  // namespace moestat::cli
