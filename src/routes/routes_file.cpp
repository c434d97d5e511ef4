// The routes file: RoutedExperts <-> named tensors with JSON metadata, in a safetensors
// container (io/safetensors.hpp does the container and its bounds).
#include <fmt/format.h>

#include <limits>
#include <map>
#include <moestat/error.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/read_bounds.hpp>
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

/// Any int64: the range of a layout's fields is RouteLayout::validate's to check, the one
/// check the writer makes too.
std::int64_t any_int_field(const Json& object, std::string_view key, std::string_view where) {
  return int_field(object, key, where, std::numeric_limits<std::int64_t>::min(),
                   std::numeric_limits<std::int64_t>::max());
}

std::uint64_t uint_field(const Json& object, std::string_view key, std::string_view where) {
  const Json& value = field(object, key, where);
  MOESTAT_CHECK(value.is_number_unsigned(), "routes file: {}.{} = {} is not an unsigned integer",
                where, key, value.dump());
  return value.get<std::uint64_t>();
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
    // The bounds of moestat's own JSON readers first: nesting, memory, keys given twice.
    io::check_json(found->second);
    return Json::parse(found->second);
  } catch (const Error& error) {
    throw error.with_context(fmt::format("routes file: the \"{}\" metadata", key));
  } catch (const Json::exception&) {
    MOESTAT_FAIL("routes file: the \"{}\" metadata is not JSON", key);
  }
}

RouteLayout layout_of(const Json& json) {
  RouteLayout layout;
  layout.num_decoder_layers = any_int_field(json, "num_decoder_layers", "layout");
  layout.num_experts = any_int_field(json, "num_experts", "layout");
  layout.top_k = any_int_field(json, "top_k", "layout");
  const Json& layers = field(json, "layers", "layout");
  MOESTAT_CHECK(layers.is_array(), "routes file: layout.layers is not an array");
  for (const Json& layer : layers) {
    MOESTAT_CHECK(layer.is_number_integer(), "routes file: layout.layers holds a non-integer");
    layout.layers.push_back(layer.get<std::int64_t>());
  }
  layout.validate();
  return layout;
}

/// What "requests" says of one request, read before any of its rows is allocated.
struct RequestEntry {
  std::string request_id;
  std::int64_t first_position = 0;
  std::int64_t num_tokens = 0;
  std::string model;
  std::uint64_t placement_version = 0;
};

Json entry_json(const RoutedExperts& request) {
  return {{"request_id", request.request_id},
          {"first_position", request.first_position},
          {"num_tokens", request.num_tokens()},
          {"model", request.model},
          {"placement_version", request.placement_version}};
}

/// Entries of "requests", each checked for its fields, their types and that its rows are
/// among the `total` the tensors hold (positions are RoutedExperts::validate's to check).
std::vector<RequestEntry> entries_of(const Json& requests, std::int64_t total) {
  std::vector<RequestEntry> out;
  std::int64_t row = 0;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const std::string where = fmt::format("requests[{}]", i);
    RequestEntry entry;
    entry.num_tokens = int_field(requests[i], "num_tokens", where, 0, total - row);
    entry.request_id = string_field(requests[i], "request_id", where);
    entry.first_position = any_int_field(requests[i], "first_position", where);
    entry.model = string_field(requests[i], "model", where);
    entry.placement_version = uint_field(requests[i], "placement_version", where);
    row += entry.num_tokens;
    out.push_back(std::move(entry));
  }
  MOESTAT_CHECK(row == total, "routes file: the requests cover {} of its {} rows", row, total);
  return out;
}

/// The bytes a routes file's tensors and metadata hold: its size but for the container's
/// header, the same on the writer's side and the reader's.
std::uint64_t stored_bytes(const io::NamedTensors& tensors) {
  std::uint64_t bytes = 0;
  for (const auto& [key, value] : tensors.metadata) bytes += key.size() + value.size();
  for (const auto& [name, tensor] : tensors.tensors) bytes += tensor.data.size();
  return bytes;
}

/// The memory one request takes once read: its rows, and beyond them its own copy of the
/// layout's layers, its strings, and the object with its shapes (128 bytes for their heap
/// blocks, from above).
std::uint64_t request_memory(const RouteLayout& layout, const RequestEntry& entry) {
  return std::uint64_t(entry.num_tokens) * std::uint64_t(layout.bytes_per_token()) +
         sizeof(RoutedExperts) + 128 + std::uint64_t(layout.num_columns()) * 8 +
         entry.request_id.size() + entry.model.size();
}

/// The checks of a whole file that the writer and the reader share: request ids distinct
/// (a reader keying requests by id would silently keep one of two), and reading it takes at
/// most io::read_memory_bound of what it stores (many empty requests each copy the layout).
void check_requests(const RouteLayout& layout, std::span<const RequestEntry> entries,
                    std::uint64_t file_bytes) {
  std::map<std::string_view, std::size_t> seen;
  std::uint64_t memory = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto [first, fresh] = seen.emplace(entries[i].request_id, i);
    MOESTAT_CHECK(fresh,
                  "routes file: requests[{}] and requests[{}] are both request \"{}\"; a file "
                  "holds each request once (join the pieces of one with append)",
                  first->second, i, entries[i].request_id);
    memory += request_memory(layout, entries[i]);
  }
  MOESTAT_CHECK(memory <= io::read_memory_bound(file_bytes),
                "routes file: its {} requests would take {} bytes of memory once read, more than "
                "{} times its {} bytes plus 1 MiB (each request holds its own copy of the "
                "layout's {} MoE layers)",
                entries.size(), memory, io::kReadExpansion, file_bytes, layout.num_columns());
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
  std::vector<RequestEntry> entries;
  io::HostTensor ids = RoutedExperts::unrecorded(layout, "", 0, 0).ids;
  io::HostTensor valid = RoutedExperts::unrecorded(layout, "", 0, 0).valid;
  for (const RoutedExperts& request : routes) {
    request.validate();
    MOESTAT_CHECK(request.layout == layout,
                  "routes file: request {} has another layout than request {}", request.request_id,
                  routes.front().request_id);
    requests.push_back(entry_json(request));
    entries.push_back({request.request_id, request.first_position, request.num_tokens(),
                       request.model, request.placement_version});
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
  check_requests(layout, entries, stored_bytes(out));
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
  const std::vector<RequestEntry> entries = entries_of(requests, ids->shape[0]);
  check_requests(layout, entries, stored_bytes(tensors));
  const std::size_t id_row =
      std::size_t(layout.num_columns() * layout.top_k) * dtype_size(ids->dtype);
  const std::size_t valid_row = std::size_t(layout.num_columns());

  std::vector<RoutedExperts> out;
  out.reserve(entries.size());
  std::size_t row = 0;
  for (const RequestEntry& entry : entries) {
    RoutedExperts request =
        RoutedExperts::unrecorded(layout, entry.request_id, 0, entry.num_tokens);
    request.first_position = entry.first_position;
    request.model = entry.model;
    request.placement_version = entry.placement_version;
    std::copy_n(ids->data.begin() + std::ptrdiff_t(row * id_row),
                std::size_t(entry.num_tokens) * id_row, request.ids.data.begin());
    std::copy_n(valid->data.begin() + std::ptrdiff_t(row * valid_row),
                std::size_t(entry.num_tokens) * valid_row, request.valid.data.begin());
    try {
      request.validate();
    } catch (const Error& error) {
      throw error.with_context("routes file");
    }
    row += std::size_t(entry.num_tokens);
    out.push_back(std::move(request));
  }
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
