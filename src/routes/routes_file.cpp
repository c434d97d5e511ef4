// The routes file: RoutedExperts <-> named tensors with JSON metadata, in a safetensors
// container (io/safetensors.hpp does the container and its bounds).
#include <fmt/format.h>

#include <limits>
#include <moestat/error.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/safetensors.hpp>
#include <moestat/routes/routes_file.hpp>
#include <nlohmann/json.hpp>

namespace moestat::routes {
namespace {

using Json = nlohmann::json;
constexpr std::string_view kVersion = "1";

Json layout_json(const RouteLayout& layout) {
  return {{"num_decoder_layers", layout.num_decoder_layers},
          {"layers", layout.layers},
          {"num_experts", layout.num_experts},
          {"top_k", layout.top_k}};
}

const Json& field(const Json& object, std::string_view key, std::string_view where) {
  MOESTAT_CHECK(object.is_object(), "routes file: {} is not a JSON object", where);
  const auto found = object.find(key);
  MOESTAT_CHECK(found != object.end(), "routes file: {} has no \"{}\"", where, key);
  return *found;
}

std::int64_t int_field(const Json& object, std::string_view key, std::string_view where,
                       std::int64_t min, std::int64_t max) {
  const Json& value = field(object, key, where);
  MOESTAT_CHECK(value.is_number_integer(), "routes file: {}.{} is not an integer", where, key);
  const bool too_large =
      value.is_number_unsigned() && value.get<std::uint64_t>() > std::uint64_t(max);
  MOESTAT_CHECK(!too_large && value.get<std::int64_t>() >= min && value.get<std::int64_t>() <= max,
                "routes file: {}.{} = {} outside [{}, {}]", where, key, value.dump(), min, max);
  return value.get<std::int64_t>();
}

std::string string_field(const Json& object, std::string_view key, std::string_view where) {
  const Json& value = field(object, key, where);
  MOESTAT_CHECK(value.is_string(), "routes file: {}.{} is not a string", where, key);
  return value.get<std::string>();
}

Json parse_metadata(const io::NamedTensors& tensors, const std::string& key) {
  const auto found = tensors.metadata.find(key);
  MOESTAT_CHECK(found != tensors.metadata.end(), "routes file: no \"{}\" metadata", key);
  try {
    return Json::parse(found->second);
  } catch (const Json::exception&) {
    MOESTAT_FAIL("routes file: the \"{}\" metadata is not JSON", key);
  }
}

RouteLayout layout_of(const Json& json) {
  constexpr std::int64_t kMax = (std::int64_t(1) << 31) - 1;
  RouteLayout layout;
  layout.num_decoder_layers = int_field(json, "num_decoder_layers", "layout", 1, kMax);
  layout.num_experts = int_field(json, "num_experts", "layout", 1, kMax);
  layout.top_k = int_field(json, "top_k", "layout", 1, kMax);
  const Json& layers = field(json, "layers", "layout");
  MOESTAT_CHECK(layers.is_array() && std::int64_t(layers.size()) <= layout.num_decoder_layers,
                "routes file: layout.layers is not an array of at most {} layers",
                layout.num_decoder_layers);
  for (const Json& layer : layers) {
    MOESTAT_CHECK(layer.is_number_integer(), "routes file: layout.layers holds a non-integer");
    layout.layers.push_back(layer.get<std::int64_t>());
  }
  layout.validate();
  return layout;
}

}  // namespace

bool is_routes_file(const io::NamedTensors& tensors) noexcept {
  const auto found = tensors.metadata.find("format");
  return found != tensors.metadata.end() && found->second == kRoutesFormat;
}

io::NamedTensors routes_to_tensors(std::span<const RoutedExperts> routes) {
  MOESTAT_CHECK(!routes.empty(), "routes file: no requests to write");
  const RouteLayout& layout = routes.front().layout;
  io::NamedTensors out;
  Json requests = Json::array();
  io::HostTensor ids = RoutedExperts::unrecorded(layout, "", 0, 0).ids;
  io::HostTensor valid = RoutedExperts::unrecorded(layout, "", 0, 0).valid;
  for (const RoutedExperts& request : routes) {
    request.validate();
    MOESTAT_CHECK(request.layout == layout,
                  "routes file: request {} has another layout than request {}", request.request_id,
                  routes.front().request_id);
    requests.push_back({{"request_id", request.request_id},
                        {"first_position", request.first_position},
                        {"num_tokens", request.num_tokens()},
                        {"model", request.model},
                        {"placement_version", request.placement_version}});
    ids.data.insert(ids.data.end(), request.ids.data.begin(), request.ids.data.end());
    valid.data.insert(valid.data.end(), request.valid.data.begin(), request.valid.data.end());
    ids.shape[0] += request.num_tokens();
    valid.shape[0] += request.num_tokens();
  }
  out.metadata = {{"format", std::string(kRoutesFormat)},
                  {"version", std::string(kVersion)},
                  {"layout", layout_json(layout).dump()},
                  {"requests", requests.dump()}};
  out.tensors.emplace_back("ids", std::move(ids));
  out.tensors.emplace_back("valid", std::move(valid));
  return out;
}

std::vector<RoutedExperts> routes_from_tensors(const io::NamedTensors& tensors) {
  MOESTAT_CHECK(is_routes_file(tensors),
                "not a routes file (its metadata has no \"format\": \"{}\")", kRoutesFormat);
  const auto version = tensors.metadata.find("version");
  MOESTAT_CHECK(version != tensors.metadata.end() && version->second == kVersion,
                "routes file: version {} (this moestat reads version {})",
                version == tensors.metadata.end() ? std::string("missing") : version->second,
                kVersion);
  const RouteLayout layout = layout_of(parse_metadata(tensors, "layout"));
  const Json requests = parse_metadata(tensors, "requests");
  MOESTAT_CHECK(requests.is_array() && !requests.empty(),
                "routes file: \"requests\" is not a non-empty array");
  MOESTAT_CHECK(tensors.tensors.size() == 2, "routes file: {} tensors; expected ids and valid",
                tensors.tensors.size());
  const io::HostTensor* ids = tensors.find("ids");
  const io::HostTensor* valid = tensors.find("valid");
  MOESTAT_CHECK(ids != nullptr && valid != nullptr,
                "routes file: no \"ids\" or no \"valid\" tensor");
  MOESTAT_CHECK(ids->dtype == layout.id_dtype(), "routes file: ids are {}; {} experts need {}",
                dtype_name(ids->dtype), layout.num_experts, dtype_name(layout.id_dtype()));
  MOESTAT_CHECK(ids->shape.size() == 3 && ids->shape[1] == layout.num_columns() &&
                    ids->shape[2] == layout.top_k,
                "routes file: ids must be [tokens, {}, {}]", layout.num_columns(), layout.top_k);
  MOESTAT_CHECK(valid->dtype == DType::kBool && valid->shape.size() == 2 &&
                    valid->shape[0] == ids->shape[0] && valid->shape[1] == layout.num_columns(),
                "routes file: valid must be bool [{}, {}]", ids->shape[0], layout.num_columns());
  const std::int64_t total = ids->shape[0];
  const std::size_t id_row =
      std::size_t(layout.num_columns() * layout.top_k) * dtype_size(ids->dtype);
  const std::size_t valid_row = std::size_t(layout.num_columns());

  std::vector<RoutedExperts> out;
  std::int64_t row = 0;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const std::string where = fmt::format("requests[{}]", i);
    const std::int64_t num_tokens = int_field(requests[i], "num_tokens", where, 0, total - row);
    RoutedExperts request = RoutedExperts::unrecorded(
        layout, string_field(requests[i], "request_id", where),
        int_field(requests[i], "first_position", where, 0, std::int64_t(1) << 62), num_tokens);
    request.model = string_field(requests[i], "model", where);
    request.placement_version = std::uint64_t(int_field(requests[i], "placement_version", where, 0,
                                                        std::numeric_limits<std::int64_t>::max()));
    std::copy_n(ids->data.begin() + std::ptrdiff_t(std::size_t(row) * id_row),
                std::size_t(num_tokens) * id_row, request.ids.data.begin());
    std::copy_n(valid->data.begin() + std::ptrdiff_t(std::size_t(row) * valid_row),
                std::size_t(num_tokens) * valid_row, request.valid.data.begin());
    try {
      request.validate();
    } catch (const Error& error) {
      throw error.with_context("routes file");
    }
    row += num_tokens;
    out.push_back(std::move(request));
  }
  MOESTAT_CHECK(row == total, "routes file: the requests cover {} of its {} rows", row, total);
  return out;
}

void write_routes_file(const std::filesystem::path& path, std::span<const RoutedExperts> routes) {
  io::write_file_atomically(path, io::safetensors_to_bytes(routes_to_tensors(routes)));
}

std::vector<RoutedExperts> read_routes_file(const std::filesystem::path& path) {
  const io::NamedTensors tensors = io::read_safetensors_file(path);
  try {
    return routes_from_tensors(tensors);
  } catch (const Error& error) {
    throw error.with_context(path.string());
  }
}

std::vector<RoutedExperts> read_routes(std::span<const std::byte> bytes, std::string_view name) {
  const io::NamedTensors tensors = io::read_safetensors(bytes, name);
  try {
    return routes_from_tensors(tensors);
  } catch (const Error& error) {
    throw error.with_context(std::string(name));
  }
}

}  // namespace moestat::routes
