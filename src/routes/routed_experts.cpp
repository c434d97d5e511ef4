// RouteLayout and RoutedExperts: their checks, element access, slices and appends.
#include <algorithm>
#include <cstring>
#include <moestat/error.hpp>
#include <moestat/routes/routed_experts.hpp>

namespace moestat::routes {

RouteLayout RouteLayout::of(const ModelTopology& topology) {
  topology.validate();
  RouteLayout layout;
  layout.num_decoder_layers = topology.num_layers;
  for (std::int64_t layer = 0; layer < topology.num_layers; ++layer) {
    if (topology.is_moe(layer)) layout.layers.push_back(layer);
  }
  layout.num_experts = topology.num_logical_experts;
  layout.top_k = topology.top_k;
  layout.validate();
  return layout;
}

DType RouteLayout::id_dtype() const noexcept {
  if (num_experts <= 256) return DType::kUInt8;
  if (num_experts <= 65536) return DType::kUInt16;
  return DType::kInt32;
}

std::int64_t RouteLayout::bytes_per_token() const noexcept {
  return num_columns() * (top_k * std::int64_t(dtype_size(id_dtype())) + 1);
}

std::int64_t RouteLayout::column_of(std::int64_t layer) const noexcept {
  const auto found = std::lower_bound(layers.begin(), layers.end(), layer);
  return found != layers.end() && *found == layer ? std::int64_t(found - layers.begin()) : -1;
}

void RouteLayout::validate() const {
  MOESTAT_CHECK(num_decoder_layers >= 1 && num_decoder_layers <= kMaxDecoderLayers,
                "route layout: {} decoder layers; need 1 to {}", num_decoder_layers,
                kMaxDecoderLayers);
  MOESTAT_CHECK(!layers.empty(), "route layout: no MoE layer");
  for (std::size_t i = 0; i < layers.size(); ++i) {
    MOESTAT_CHECK(layers[i] >= 0 && layers[i] < num_decoder_layers,
                  "route layout: layer {} outside the model's {} decoder layers", layers[i],
                  num_decoder_layers);
    MOESTAT_CHECK(i == 0 || layers[i] > layers[i - 1],
                  "route layout: layers must ascend without repeats ({} after {})", layers[i],
                  layers[i - 1]);
  }
  MOESTAT_CHECK(num_experts >= 1 && num_experts <= kMaxExperts,
                "route layout: {} experts; need 1 to 2^31 - 1", num_experts);
  MOESTAT_CHECK(top_k >= 1 && top_k <= num_experts,
                "route layout: top_k {} outside [1, {}] (the experts)", top_k, num_experts);
}

RoutedExperts RoutedExperts::unrecorded(RouteLayout layout, std::string request_id,
                                        std::int64_t first_position, std::int64_t num_tokens) {
  layout.validate();
  MOESTAT_CHECK(num_tokens >= 0, "routes: {} tokens", num_tokens);
  RoutedExperts routes;
  routes.request_id = std::move(request_id);
  routes.first_position = first_position;
  routes.ids.dtype = layout.id_dtype();
  routes.ids.shape = {num_tokens, layout.num_columns(), layout.top_k};
  routes.ids.data.assign(std::size_t(routes.ids.numel()) * dtype_size(routes.ids.dtype),
                         std::byte{0});
  routes.valid.dtype = DType::kBool;
  routes.valid.shape = {num_tokens, layout.num_columns()};
  routes.valid.data.assign(std::size_t(routes.valid.numel()), std::byte{0});
  routes.layout = std::move(layout);
  return routes;
}

namespace {

std::int64_t element_index(const RoutedExperts& routes, std::int64_t token, std::int64_t column,
                           std::int64_t k) noexcept {
  return (token * routes.layout.num_columns() + column) * routes.layout.top_k + k;
}

}  // namespace

std::int64_t RoutedExperts::id(std::int64_t token, std::int64_t column,
                               std::int64_t k) const noexcept {
  const std::size_t at = std::size_t(element_index(*this, token, column, k));
  switch (ids.dtype) {
    case DType::kUInt8:
      return std::int64_t(std::to_integer<std::uint8_t>(ids.data[at]));
    case DType::kUInt16: {
      std::uint16_t value;
      std::memcpy(&value, ids.data.data() + at * 2, 2);
      return value;
    }
    default: {
      std::int32_t value;
      std::memcpy(&value, ids.data.data() + at * 4, 4);
      return value;
    }
  }
}

void RoutedExperts::set_id(std::int64_t token, std::int64_t column, std::int64_t k,
                           std::int64_t id) noexcept {
  const std::size_t at = std::size_t(element_index(*this, token, column, k));
  switch (ids.dtype) {
    case DType::kUInt8:
      ids.data[at] = std::byte(std::uint8_t(id));
      return;
    case DType::kUInt16: {
      const auto value = std::uint16_t(id);
      std::memcpy(ids.data.data() + at * 2, &value, 2);
      return;
    }
    default: {
      const auto value = std::int32_t(id);
      std::memcpy(ids.data.data() + at * 4, &value, 4);
      return;
    }
  }
}

bool RoutedExperts::is_valid(std::int64_t token, std::int64_t column) const noexcept {
  return valid.data[std::size_t(token * layout.num_columns() + column)] != std::byte{0};
}

bool RoutedExperts::complete() const noexcept {
  return std::all_of(valid.data.begin(), valid.data.end(),
                     [](std::byte flag) { return flag != std::byte{0}; });
}

RoutedExperts RoutedExperts::slice(std::int64_t begin, std::int64_t end) const {
  MOESTAT_CHECK(begin >= 0 && begin <= end && end <= num_tokens(),
                "routes of {}: rows [{}, {}) outside its {} tokens", request_id, begin, end,
                num_tokens());
  RoutedExperts out = unrecorded(layout, request_id, first_position + begin, end - begin);
  out.model = model;
  out.placement_version = placement_version;
  const std::size_t id_row =
      out.ids.data.size() / std::size_t(std::max<std::int64_t>(1, end - begin));
  const std::size_t valid_row = std::size_t(layout.num_columns());
  if (end > begin) {
    std::memcpy(out.ids.data.data(), ids.data.data() + std::size_t(begin) * id_row,
                out.ids.data.size());
    std::memcpy(out.valid.data.data(), valid.data.data() + std::size_t(begin) * valid_row,
                out.valid.data.size());
  }
  return out;
}

void RoutedExperts::append(const RoutedExperts& next) {
  MOESTAT_CHECK(next.request_id == request_id, "routes: cannot append request {} to request {}",
                next.request_id, request_id);
  MOESTAT_CHECK(next.layout == layout, "routes of {}: appended rows have another layout",
                request_id);
  MOESTAT_CHECK(next.first_position == first_position + num_tokens(),
                "routes of {}: appended rows start at position {}, these end at {}", request_id,
                next.first_position, first_position + num_tokens());
  ids.data.insert(ids.data.end(), next.ids.data.begin(), next.ids.data.end());
  valid.data.insert(valid.data.end(), next.valid.data.begin(), next.valid.data.end());
  ids.shape[0] += next.num_tokens();
  valid.shape[0] += next.num_tokens();
  placement_version = next.placement_version;
}

namespace {

/// The shapes, dtypes and sizes of `routes`' tensors against its layout and the bytes they
/// hold: checked before anything is allocated from a size the layout declares.
void check_shapes(const RoutedExperts& routes) {
  const RouteLayout& layout = routes.layout;
  const std::string& request_id = routes.request_id;
  MOESTAT_CHECK(routes.ids.dtype == layout.id_dtype(),
                "routes of {}: ids are {}, {} experts need {}", request_id,
                dtype_name(routes.ids.dtype), layout.num_experts, dtype_name(layout.id_dtype()));
  const std::vector<std::int64_t>& shape = routes.ids.shape;
  MOESTAT_CHECK(shape.size() == 3 && shape[0] >= 0 && shape[1] == layout.num_columns() &&
                    shape[2] == layout.top_k,
                "routes of {}: ids must be [tokens, {}, {}] (tokens, MoE layers, top_k)",
                request_id, layout.num_columns(), layout.top_k);
  // A row's bytes, at most 2^16 x (2^31 - 1) x 4: no overflow. The tokens are then what the
  // bytes hold, not a product that a declared count could overflow.
  const std::size_t row_bytes =
      std::size_t(layout.num_columns() * layout.top_k) * dtype_size(routes.ids.dtype);
  MOESTAT_CHECK(routes.ids.data.size() % row_bytes == 0 &&
                    routes.ids.data.size() / row_bytes == std::size_t(shape[0]),
                "routes of {}: ids hold {} bytes, not the {} tokens x {} bytes their shape says",
                request_id, routes.ids.data.size(), shape[0], row_bytes);
  MOESTAT_CHECK(routes.valid.dtype == DType::kBool && routes.valid.shape.size() == 2 &&
                    routes.valid.shape[0] == shape[0] &&
                    routes.valid.shape[1] == layout.num_columns() &&
                    routes.valid.data.size() == std::size_t(shape[0] * layout.num_columns()),
                "routes of {}: valid must be a bool [{}, {}] tensor (tokens, MoE layers)",
                request_id, shape[0], layout.num_columns());
}

/// Every row's ids against its validity: ids in [0, E) without repeats where recorded, 0
/// where not; every valid byte 0 or 1 (another value would read as true here and may not
/// elsewhere).
void check_rows(const RoutedExperts& routes) {
  const RouteLayout& layout = routes.layout;
  if (routes.num_tokens() == 0) return;
  // Backed by the ids: check_shapes found top_k ids per row in the data.
  std::vector<std::int64_t> row(std::size_t(layout.top_k));
  for (std::int64_t token = 0; token < routes.num_tokens(); ++token) {
    for (std::int64_t column = 0; column < layout.num_columns(); ++column) {
      const std::int64_t layer = layout.layers[std::size_t(column)];
      const std::int64_t position = routes.first_position + token;
      const auto flag = routes.valid.data[std::size_t(token * layout.num_columns() + column)];
      MOESTAT_CHECK(flag == std::byte{0} || flag == std::byte{1},
                    "routes of {}: position {} layer {}: valid byte {} is neither 0 nor 1",
                    routes.request_id, position, layer, int(flag));
      for (std::int64_t k = 0; k < layout.top_k; ++k) {
        row[std::size_t(k)] = routes.id(token, column, k);
      }
      if (flag == std::byte{0}) {
        MOESTAT_CHECK(std::all_of(row.begin(), row.end(), [](std::int64_t v) { return v == 0; }),
                      "routes of {}: position {} layer {} is not valid but holds ids",
                      routes.request_id, position, layer);
        continue;
      }
      for (std::int64_t value : row) {
        MOESTAT_CHECK(value >= 0 && value < layout.num_experts,
                      "routes of {}: position {} layer {}: expert {} outside [0, {})",
                      routes.request_id, position, layer, value, layout.num_experts);
      }
      std::sort(row.begin(), row.end());
      MOESTAT_CHECK(std::adjacent_find(row.begin(), row.end()) == row.end(),
                    "routes of {}: position {} layer {} chose an expert twice", routes.request_id,
                    position, layer);
    }
  }
}

}  // namespace

void RoutedExperts::validate() const {
  layout.validate();
  check_shapes(*this);
  MOESTAT_CHECK(first_position >= 0 && first_position <= kMaxPosition - num_tokens(),
                "routes of {}: first position {} with {} tokens; positions must stay in [0, 2^62]",
                request_id, first_position, num_tokens());
  check_rows(*this);
}

}  // namespace moestat::routes
