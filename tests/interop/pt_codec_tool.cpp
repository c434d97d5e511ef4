// Test tool for the torch interop test: moestat's .pt reader and writer driven from Python
// through a tagged JSON form of values that both sides can produce and compare exactly.
//
//   pt_codec_tool to-json FILE.pt            prints the value FILE.pt holds
//   pt_codec_tool from-json FILE.json OUT.pt writes the value FILE.json describes
//
// Tagged form: ["none"], ["bool", b], ["int", n], ["float", bits of the double],
// ["str", s], ["list", [...]], ["tuple", [...]], ["dict", [[key, value], ...]],
// ["tensor", dtype, shape, device, values] with float values as their bits (u32 / u64).
#include <bit>
#include <cstdio>
#include <cstring>
#include <moestat/error.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/pt.hpp>
#include <nlohmann/json.hpp>

namespace moestat {
namespace {

using nlohmann::json;

DType dtype_named(const std::string& name) {
  for (DType dtype :
       {DType::kInt32, DType::kInt64, DType::kFloat32, DType::kFloat64, DType::kBool}) {
    if (dtype_name(dtype) == name) return dtype;
  }
  MOESTAT_FAIL("unknown dtype {}", name);
}

template <typename T, typename Bits>
json bit_values(const io::HostTensor& tensor) {
  json out = json::array();
  for (T value : tensor.values<T>()) out.push_back(std::bit_cast<Bits>(value));
  return out;
}

json encode(const io::PtValue& value) {
  using Kind = io::PtValue::Kind;
  switch (value.kind()) {
    case Kind::kNone:
      return {"none"};
    case Kind::kBool:
      return {"bool", value.as_bool()};
    case Kind::kInt:
      return {"int", value.as_int()};
    case Kind::kFloat:
      return {"float", std::bit_cast<std::uint64_t>(value.as_float())};
    case Kind::kStr:
      return {"str", value.as_str()};
    case Kind::kList:
    case Kind::kTuple: {
      json items = json::array();
      const auto& values = value.kind() == Kind::kList ? value.list() : value.tuple().items;
      for (const io::PtValue& item : values) items.push_back(encode(item));
      return {value.kind() == Kind::kList ? "list" : "tuple", items};
    }
    case Kind::kDict: {
      json items = json::array();
      for (const auto& [key, item] : value.dict())
        items.push_back(json::array({encode(key), encode(item)}));
      return {"dict", items};
    }
    case Kind::kTensor: {
      const io::HostTensor& tensor = value.tensor();
      json values;
      switch (tensor.dtype) {
        case DType::kFloat32:
          values = bit_values<float, std::uint32_t>(tensor);
          break;
        case DType::kFloat64:
          values = bit_values<double, std::uint64_t>(tensor);
          break;
        default:
          values = tensor.to_int64();
      }
      return {"tensor", dtype_name(tensor.dtype), tensor.shape, io::device_name(tensor.device),
              values};
    }
  }
  MOESTAT_FAIL("unknown kind");
}

io::PtValue decode(const json& tagged) {
  const std::string tag = tagged.at(0);
  if (tag == "none") return {};
  if (tag == "bool") return io::PtValue(tagged.at(1).get<bool>());
  if (tag == "int") return io::PtValue(tagged.at(1).get<std::int64_t>());
  if (tag == "float") return io::PtValue(std::bit_cast<double>(tagged.at(1).get<std::uint64_t>()));
  if (tag == "str") return io::PtValue(tagged.at(1).get<std::string>());
  if (tag == "list" || tag == "tuple") {
    std::vector<io::PtValue> items;
    for (const json& item : tagged.at(1)) items.push_back(decode(item));
    return tag == "list" ? io::PtValue(std::move(items))
                         : io::PtValue(io::PtTuple{std::move(items)});
  }
  if (tag == "dict") {
    io::PtDict dict;
    for (const json& item : tagged.at(1)) dict.emplace_back(decode(item.at(0)), decode(item.at(1)));
    return io::PtValue(std::move(dict));
  }
  MOESTAT_CHECK(tag == "tensor", "unknown tag {}", tag);
  io::HostTensor tensor;
  tensor.dtype = dtype_named(tagged.at(1));
  tensor.shape = tagged.at(2).get<std::vector<std::int64_t>>();
  const std::string device = tagged.at(3);
  tensor.device = device == "cpu" ? Device::cpu() : Device::cuda(std::stoi(device.substr(5)));
  for (const json& element : tagged.at(4)) {
    const std::size_t size = dtype_size(tensor.dtype);
    std::uint64_t bits = 0;
    switch (tensor.dtype) {
      case DType::kFloat32:
      case DType::kFloat64:
        bits = element.get<std::uint64_t>();
        break;
      default:
        bits = std::bit_cast<std::uint64_t>(element.get<std::int64_t>());
    }
    const auto* bytes = reinterpret_cast<const std::byte*>(&bits);
    tensor.data.insert(tensor.data.end(), bytes, bytes + size);  // little-endian low bytes
  }
  return io::PtValue(std::move(tensor));
}

}  // namespace
}  // namespace moestat

int main(int argc, char** argv) {
  try {
    const std::string command = argc > 1 ? argv[1] : "";
    if (command == "to-json" && argc == 3) {
      std::printf("%s\n", moestat::encode(moestat::io::read_pt_file(argv[2])).dump().c_str());
      return 0;
    }
    if (command == "from-json" && argc == 4) {
      const auto tagged = nlohmann::json::parse(moestat::io::read_text_file(argv[2]));
      moestat::io::write_pt_file(argv[3], moestat::decode(tagged));
      return 0;
    }
    std::fprintf(stderr, "usage: pt_codec_tool to-json FILE.pt | from-json FILE.json OUT.pt\n");
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "pt_codec_tool: %s\n", error.what());
    return 1;
  }
}
