// The routed experts of a request's tokens: for each token, the top-k logical expert ids that
// every MoE layer chose. What RL trainers replay so that their router picks the experts the
// rollout engine picked ("Rollout Routing Replay"); the route recorders
// (routes/route_recorder.hpp) make it, routes/routes_file.hpp reads and writes it.
#pragma once

#include <cstdint>
#include <moestat/io/host_tensor.hpp>
#include <moestat/topology.hpp>
#include <string>
#include <vector>

namespace moestat::routes {

/// The largest position a route may reach: first_position + num_tokens of every RoutedExperts,
/// in a route recorder and in a routes file, stays at or below it, so no sum of a position and
/// a count overflows.
inline constexpr std::int64_t kMaxPosition = std::int64_t(1) << 62;
/// The most decoder layers a RouteLayout may have: 2^16, about a thousand times
/// DeepSeek-V3's 61. The all-layer formats (SGLang, vLLM, slime, verl's R3) take an entry per
/// decoder layer, dense ones included, so an array of them grows with it, however few the MoE
/// layers a routes file holds.
inline constexpr std::int64_t kMaxDecoderLayers = std::int64_t(1) << 16;
/// The most experts a RouteLayout may have: ids are at most int32.
inline constexpr std::int64_t kMaxExperts = (std::int64_t(1) << 31) - 1;

/// What the columns of a route row are.
struct RouteLayout {
  std::int64_t num_decoder_layers = 0;  ///< L: decoder layers of the model, dense ones included.
  std::vector<std::int64_t> layers;     ///< Decoder layer of each column, ascending: the MoE ones.
  std::int64_t num_experts = 0;         ///< E: logical experts; every id is in [0, E).
  std::int64_t top_k = 0;               ///< Expert ids per token and layer.

  /// The MoE layers of `topology`, its logical experts and top_k.
  static RouteLayout of(const ModelTopology& topology);

  std::int64_t num_columns() const noexcept { return std::int64_t(layers.size()); }
  /// The narrowest dtype that holds every id: uint8 up to 256 experts, uint16 up to 65536,
  /// int32 beyond.
  DType id_dtype() const noexcept;
  /// Bytes one token's routes take: its ids plus one validity byte per column.
  std::int64_t bytes_per_token() const noexcept;
  /// The column of decoder layer `layer`; -1 when it is not one of `layers`.
  std::int64_t column_of(std::int64_t layer) const noexcept;
  /// moestat::Error unless 1 <= num_decoder_layers <= kMaxDecoderLayers, the layers ascend
  /// inside [0, num_decoder_layers), there is at least one, 1 <= num_experts <= kMaxExperts
  /// and 1 <= top_k <= num_experts.
  void validate() const;

  friend bool operator==(const RouteLayout&, const RouteLayout&) = default;
};

/// The routes of tokens [first_position, first_position + num_tokens()) of one request.
///
/// A token whose route a layer did not record (a position in a gap that no pass routed, a
/// slot never written, a row the recorder had no room for, a router that gave an invalid id)
/// is not silently zero: its `valid` entry is false, and its ids are 0. Positions before
/// first_position are not part of it at all (a route recorder's routes of a request start at
/// its first routed position: a prompt prefix served from the cache is absent).
struct RoutedExperts {
  std::string request_id;
  std::int64_t first_position = 0;  ///< Position in the request of the first token (row 0).
  RouteLayout layout;
  io::HostTensor ids;    ///< [num_tokens, num_columns, top_k] of layout.id_dtype(): logical ids.
  io::HostTensor valid;  ///< [num_tokens, num_columns] bool: the layer's row was recorded.
  std::string model;     ///< Free text naming the model (an engine's model path), may be empty.
  std::uint64_t placement_version = 0;  ///< The placement in force at the last recorded pass.

  /// num_tokens rows, none valid.
  static RoutedExperts unrecorded(RouteLayout layout, std::string request_id,
                                  std::int64_t first_position, std::int64_t num_tokens);

  std::int64_t num_tokens() const noexcept { return ids.shape.empty() ? 0 : ids.shape[0]; }
  /// Id `k` of token `token` in column `column` (unchecked beyond the tensor's bounds).
  std::int64_t id(std::int64_t token, std::int64_t column, std::int64_t k) const noexcept;
  void set_id(std::int64_t token, std::int64_t column, std::int64_t k, std::int64_t id) noexcept;
  bool is_valid(std::int64_t token, std::int64_t column) const noexcept;
  /// Whether every row of every column was recorded.
  bool complete() const noexcept;
  /// Tokens [begin, end) (row numbers) as routes of their own.
  RoutedExperts slice(std::int64_t begin, std::int64_t end) const;
  /// Appends `next`'s rows: the same request and layout, starting where these end.
  void append(const RoutedExperts& next);
  /// moestat::Error naming the first problem: a layout that does not validate, shapes or
  /// dtypes that disagree with it or with the bytes held, a valid byte other than 0 and 1, an
  /// id outside [0, E), a valid row with a repeated id, an invalid row with an id other than
  /// 0, a negative first_position, first_position + num_tokens beyond kMaxPosition. The one
  /// check of what a routes file may hold: the writer refuses what the reader would.
  void validate() const;

  friend bool operator==(const RoutedExperts&, const RoutedExperts&) = default;
};

}  // namespace moestat::routes
