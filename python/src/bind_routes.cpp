// Per-request routes (routing replay): RouteLayout, RoutedExperts, the routes file, and the
// route recorders. Ids come out as numpy arrays of the layout's narrow dtype.
#include <fmt/ranges.h>
#include <nanobind/operators.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <moestat/error.hpp>
#include <moestat/routes/cpu_route_recorder.hpp>
#include <moestat/routes/route_recorder.hpp>
#include <moestat/routes/routes_file.hpp>
#ifdef MOESTAT_HAS_CUDA
#include <moestat/routes/cuda_route_recorder.hpp>
#endif

#include "arguments.hpp"
#include "arrays.hpp"
#include "bindings.hpp"

namespace moestat::python {

using namespace nb::literals;
using routes::RoutedExperts;
using routes::RouteLayout;
using routes::RouteRecorder;

namespace {

template <typename T>
nb::object bytes_as_numpy(const std::vector<std::byte>& bytes,
                          std::initializer_list<std::size_t> shape) {
  std::vector<T> values(bytes.size() / sizeof(T));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
  return to_numpy(std::move(values), shape);
}

nb::object ids_array(const RoutedExperts& routes) {
  const auto shape = {std::size_t(routes.num_tokens()), std::size_t(routes.layout.num_columns()),
                      std::size_t(routes.layout.top_k)};
  switch (routes.ids.dtype) {
    case DType::kUInt8:
      return bytes_as_numpy<std::uint8_t>(routes.ids.data, shape);
    case DType::kUInt16:
      return bytes_as_numpy<std::uint16_t>(routes.ids.data, shape);
    default:
      return bytes_as_numpy<std::int32_t>(routes.ids.data, shape);
  }
}

nb::object valid_array(const RoutedExperts& routes) {
  std::vector<std::uint8_t> flags(routes.valid.data.size());
  if (!flags.empty()) std::memcpy(flags.data(), routes.valid.data.data(), flags.size());
  return to_numpy_bool(std::move(flags), {std::size_t(routes.num_tokens()),
                                          std::size_t(routes.layout.num_columns())});
}

RoutedExperts make_routes(const RouteLayout& layout, nb::handle ids_argument,
                          nb::handle valid_argument, std::string request_id,
                          std::int64_t first_position, std::string model,
                          std::uint64_t placement_version) {
  constexpr const char* kFunction = "RoutedExperts";
  const TensorView ids =
      view_of(array_argument(ids_argument, kFunction, "ids", "of integer expert ids"), "ids");
  ids.require_cpu("RoutedExperts: ids");
  MOESTAT_CHECK(
      ids.dim() == 3 && ids.size(1) == layout.num_columns() && ids.size(2) == layout.top_k,
      "RoutedExperts: ids must be [tokens, {}, {}] (tokens, MoE layers, top_k)",
      layout.num_columns(), layout.top_k);
  MOESTAT_CHECK(ids.dtype() != DType::kFloat32 && ids.dtype() != DType::kFloat64 &&
                    ids.dtype() != DType::kBool,
                "RoutedExperts: ids must be integers, got {}", dtype_name(ids.dtype()));
  const std::int64_t num_tokens = ids.size(0);
  RoutedExperts routes =
      RoutedExperts::unrecorded(layout, std::move(request_id), first_position, num_tokens);
  routes.model = std::move(model);
  routes.placement_version = placement_version;
  std::vector<std::uint8_t> valid(std::size_t(num_tokens * layout.num_columns()), 1);
  if (!valid_argument.is_none()) {
    const TensorView flags =
        view_of(array_argument(valid_argument, kFunction, "valid", "of bools"), "valid");
    flags.require_cpu("RoutedExperts: valid");
    MOESTAT_CHECK(flags.dtype() == DType::kBool && flags.dim() == 2 &&
                      flags.size(0) == num_tokens && flags.size(1) == layout.num_columns(),
                  "RoutedExperts: valid must be a bool [{}, {}] array (tokens, MoE layers)",
                  num_tokens, layout.num_columns());
    for (std::int64_t t = 0; t < num_tokens; ++t) {
      for (std::int64_t c = 0; c < layout.num_columns(); ++c) {
        valid[std::size_t(t * layout.num_columns() + c)] = std::uint8_t(flags.int_at({t, c}));
      }
    }
  }
  for (std::int64_t t = 0; t < num_tokens; ++t) {
    for (std::int64_t c = 0; c < layout.num_columns(); ++c) {
      const bool is_valid = valid[std::size_t(t * layout.num_columns() + c)] != 0;
      routes.valid.data[std::size_t(t * layout.num_columns() + c)] = std::byte(is_valid ? 1 : 0);
      for (std::int64_t k = 0; k < layout.top_k; ++k) {
        const std::int64_t id = ids.int_at({t, c, k});
        MOESTAT_CHECK(!is_valid || (id >= 0 && id < layout.num_experts),
                      "RoutedExperts: row {} layer {}: expert {} outside [0, {})", t,
                      layout.layers[std::size_t(c)], id, layout.num_experts);
        MOESTAT_CHECK(is_valid || id == 0,
                      "RoutedExperts: row {} layer {} is not valid, so its ids must be 0", t,
                      layout.layers[std::size_t(c)]);
        routes.set_id(t, c, k, id);
      }
    }
  }
  routes.validate();
  return routes;
}

std::vector<routes::TokenSpan> batch_argument(nb::handle value) {
  constexpr const char* kExpected =
      "a list of (request_id: str, first_position: int, num_tokens: int[, first_row: int])";
  if (!nb::isinstance<nb::sequence>(value) || nb::isinstance<nb::str>(value)) {
    raise_argument_type("end_pass", "batch", kExpected, value);
  }
  std::vector<routes::TokenSpan> out;
  for (nb::handle item : value) {
    // Spans of three and of four fields may be mixed in one batch.
    std::tuple<std::string, std::int64_t, std::int64_t> span;
    std::tuple<std::string, std::int64_t, std::int64_t, std::int64_t> placed;
    if (nb::try_cast(item, span)) {
      auto& [request, first, count] = span;
      out.push_back({std::move(request), first, count});
    } else if (nb::try_cast(item, placed)) {
      auto& [request, first, count, row] = placed;
      out.push_back({std::move(request), first, count, row});
    } else {
      raise_argument_type("end_pass", "batch", kExpected, item);
    }
  }
  return out;
}

routes::RouteRecorderOptions route_options(nb::handle max_tokens_per_pass,
                                           nb::handle capacity_tokens, nb::handle keys,
                                           nb::handle num_slots, const char* function) {
  routes::RouteRecorderOptions options;
  const auto key_name =
      value_argument<std::string>(keys, function, "keys", "'requests' or 'slots'");
  MOESTAT_CHECK(key_name == "requests" || key_name == "slots",
                "{}: keys must be 'requests' or 'slots', got '{}'", function, key_name);
  options.keys =
      key_name == "slots" ? routes::RouteKeys::kSlots : routes::RouteKeys::kRequestPositions;
  options.max_tokens_per_pass =
      integer_argument<std::int64_t>(max_tokens_per_pass, function, "max_tokens_per_pass");
  options.capacity_tokens =
      integer_argument<std::int64_t>(capacity_tokens, function, "capacity_tokens");
  options.num_slots = integer_argument<std::int64_t>(num_slots, function, "num_slots");
  return options;
}

/// The class of a route recorder backend, with the constructor every backend shares.
template <typename Backend>
nb::class_<Backend, RouteRecorder> add_route_recorder(nb::module_& module, const char* name,
                                                      const char* doc) {
  return nb::class_<Backend, RouteRecorder>(module, name, doc)
      .def(
          "__init__",
          [name](Backend* self, nb::handle topology, nb::handle max_tokens_per_pass,
                 nb::handle capacity_tokens, nb::handle keys, nb::handle num_slots) {
            new (self)
                Backend(instance_argument<ModelTopology>(topology, name, "topology",
                                                         "a moestat.ModelTopology"),
                        route_options(max_tokens_per_pass, capacity_tokens, keys, num_slots, name));
          },
          "topology"_a.none(), nb::kw_only(), "max_tokens_per_pass"_a.none() = 8192,
          "capacity_tokens"_a.none() = 65536, "keys"_a.none() = "requests",
          "num_slots"_a.none() = 0,
          nb::sig("def __init__(self, topology: moestat._core.ModelTopology, *, "
                  "max_tokens_per_pass: int = 8192, capacity_tokens: int = 65536, "
                  "keys: str = 'requests', num_slots: int = 0) -> None"));
}

nb::dict tallies_dict(const routes::RouteTallies& tallies) {
  nb::dict out;
  out["passes"] = tallies.passes;
  out["tokens_recorded"] = tallies.tokens_recorded;
  out["tokens_without_room"] = tallies.tokens_without_room;
  out["tokens_already_taken"] = tallies.tokens_already_taken;
  out["invalid_ids"] = tallies.invalid_ids;
  out["layers_written_twice"] = tallies.layers_written_twice;
  out["tokens_held"] = tallies.tokens_held;
  out["tokens_pending"] = tallies.tokens_pending;
  return out;
}

}  // namespace

void bind_routes(nb::module_& module) {
  nb::class_<RouteLayout>(module, "RouteLayout",
                          "What the columns of a route row are: the decoder layer of each "
                          "(the MoE layers, ascending), the experts and top_k.")
      .def(
          "__init__",
          [](RouteLayout* self, std::int64_t num_decoder_layers, std::vector<std::int64_t> layers,
             std::int64_t num_experts, std::int64_t top_k) {
            RouteLayout layout{num_decoder_layers, std::move(layers), num_experts, top_k};
            layout.validate();
            new (self) RouteLayout(std::move(layout));
          },
          "num_decoder_layers"_a, "layers"_a, "num_experts"_a, "top_k"_a)
      .def_static("of", &RouteLayout::of, "topology"_a,
                  "The MoE layers, logical experts and top_k of a ModelTopology.")
      .def_ro("num_decoder_layers", &RouteLayout::num_decoder_layers)
      .def_ro("layers", &RouteLayout::layers)
      .def_ro("num_experts", &RouteLayout::num_experts)
      .def_ro("top_k", &RouteLayout::top_k)
      .def_prop_ro("num_columns", &RouteLayout::num_columns)
      .def_prop_ro(
          "id_dtype",
          [](const RouteLayout& layout) {
            return nb::module_::import_("numpy").attr("dtype")(
                std::string(dtype_name(layout.id_dtype())));
          },
          "The numpy dtype of the ids: uint8 up to 256 experts, uint16 up to 65536, int32.")
      .def_prop_ro("bytes_per_token", &RouteLayout::bytes_per_token,
                   "Bytes one token's routes take: ids plus one validity byte per layer.")
      .def("column_of", &RouteLayout::column_of, "layer"_a,
           "The column of decoder layer `layer`; -1 when it is not a MoE layer.")
      .def(nb::self == nb::self)
      .def("__repr__", [](const RouteLayout& layout) {
        return fmt::format(
            "RouteLayout(num_decoder_layers={}, layers=[{}], num_experts={}, "
            "top_k={})",
            layout.num_decoder_layers, fmt::join(layout.layers, ", "), layout.num_experts,
            layout.top_k);
      });

  nb::class_<routes::PendingSlots>(
      module, "PendingSlots",
      "Slot keys: a pass ended by end_pass_pending(), whose rows wait for commit_slots() or "
      "release_pending().")
      .def_ro("id", &routes::PendingSlots::id)
      .def_ro("num_tokens", &routes::PendingSlots::num_tokens, "Slots commit_slots() takes.")
      .def_ro("tokens_without_room", &routes::PendingSlots::tokens_without_room,
              "Of them, tokens given no row: their slots will read as not recorded.")
      .def("__repr__", [](const routes::PendingSlots& pending) {
        return fmt::format("PendingSlots(id={}, num_tokens={}, tokens_without_room={})", pending.id,
                           pending.num_tokens, pending.tokens_without_room);
      });

  nb::class_<RoutedExperts>(
      module, "RoutedExperts",
      "The routes of tokens [first_position, first_position + num_tokens) of one request: per "
      "token and MoE layer, the top_k logical expert ids, and whether they were recorded.")
      .def(
          "__init__",
          [](RoutedExperts* self, const RouteLayout& layout, nb::handle ids, nb::handle valid,
             std::string request_id, std::int64_t first_position, std::string model,
             std::uint64_t placement_version) {
            new (self)
                RoutedExperts(make_routes(layout, ids, valid, std::move(request_id), first_position,
                                          std::move(model), placement_version));
          },
          "layout"_a, "ids"_a, "valid"_a.none() = nb::none(), nb::kw_only(), "request_id"_a = "",
          "first_position"_a = 0, "model"_a = "", "placement_version"_a = 0,
          "ids: integer [tokens, layout.num_columns, top_k] logical ids; valid: bool [tokens, "
          "num_columns] or None (all recorded); ids of rows not valid must be 0.")
      .def_prop_ro("ids", &ids_array, "[tokens, MoE layers, top_k] of layout.id_dtype (a copy).")
      .def_prop_ro("valid", &valid_array, "[tokens, MoE layers] bool (a copy).")
      .def_ro("request_id", &RoutedExperts::request_id)
      .def_ro("first_position", &RoutedExperts::first_position)
      .def_ro("layout", &RoutedExperts::layout)
      .def_ro("model", &RoutedExperts::model)
      .def_ro("placement_version", &RoutedExperts::placement_version)
      .def_prop_ro("num_tokens", &RoutedExperts::num_tokens)
      .def_prop_ro("complete", &RoutedExperts::complete,
                   "Whether every token of every layer was recorded.")
      .def("slice", &RoutedExperts::slice, "begin"_a, "end"_a,
           "Rows [begin, end) as routes of their own.")
      .def("append", &RoutedExperts::append, "next"_a,
           "Appends the rows of the same request that follow these.")
      .def("__len__", &RoutedExperts::num_tokens)
      .def(nb::self == nb::self)
      .def("__repr__", [](const RoutedExperts& routes) {
        return fmt::format(
            "RoutedExperts(request_id={:?}, first_position={}, num_tokens={}, "
            "layers={}, top_k={}, complete={})",
            routes.request_id, routes.first_position, routes.num_tokens(),
            routes.layout.num_columns(), routes.layout.top_k, routes.complete());
      });

  module.def(
      "write_routes",
      [](nb::handle path, const std::vector<RoutedExperts>& routes) {
        routes::write_routes_file(path_argument(path, "write_routes", "path"), routes);
      },
      "path"_a, "routes"_a,
      "Writes requests' routes (one layout) as a routes file, atomically (docs/formats.md).");
  module.def(
      "read_routes",
      [](nb::handle path) {
        return routes::read_routes_file(path_argument(path, "read_routes", "path"));
      },
      "path"_a, "The requests of a routes file.");

  nb::class_<RouteRecorder>(
      module, "RouteRecorder",
      "Records each request's routes by position (docs/routing-replay.md). Hooks: begin_pass, "
      "record_topk(_layers), end_pass(batch); take/finish hand out rows of ended passes.")
      .def("begin_pass", &RouteRecorder::begin_pass, nb::call_guard<nb::gil_scoped_release>(),
           "Opens a pass.")
      .def(
          "record_topk",
          [](RouteRecorder& recorder, std::int64_t layer, nb::handle ids) {
            const TensorView view =
                view_of(array_argument(ids, "record_topk", "topk_ids", "of int32/int64 expert ids"),
                        "topk_ids");
            nb::gil_scoped_release unlocked;
            recorder.record_topk(layer, view);
          },
          "layer"_a, "topk_ids"_a,
          "Keeps a layer's [rows, >= top_k] int32/int64 PHYSICAL ids for the pass's tokens.")
      .def(
          "record_topk_layers",
          [](RouteRecorder& recorder, const std::vector<std::int64_t>& layers,
             const std::vector<nb::handle>& ids) {
            MOESTAT_CHECK(layers.size() == ids.size(),
                          "record_topk_layers: {} layers but {} id arrays", layers.size(),
                          ids.size());
            std::vector<RouteRecorder::LayerTopk> batch;
            for (std::size_t i = 0; i < layers.size(); ++i) {
              batch.push_back(
                  {layers[i], view_of(array_argument(ids[i], "record_topk_layers", "topk_ids",
                                                     "of int32/int64 expert ids"),
                                      "topk_ids")});
            }
            nb::gil_scoped_release unlocked;
            recorder.record_topk_layers(batch);
          },
          "layers"_a, "topk_ids"_a, "record_topk for several layers (one CUDA launch per 64).")
      .def(
          "end_pass",
          [](RouteRecorder& recorder, nb::handle batch) {
            const std::vector<routes::TokenSpan> spans = batch_argument(batch);
            nb::gil_scoped_release unlocked;
            recorder.end_pass(spans);
          },
          "batch"_a,
          "Closes the pass: (request_id, first_position, num_tokens[, first_row]) spans say which "
          "batch rows are which request's positions (first_row omitted: after the previous "
          "span); rows no span covers are padding. A span ends at position 2**62 at most, and "
          "the gaps a request's spans leave between two takes span capacity_tokens positions "
          "at most; a batch that breaks a rule raises moestat.Error and changes nothing.")
      .def(
          "end_pass_slots",
          [](RouteRecorder& recorder, const std::vector<std::int64_t>& slots) {
            nb::gil_scoped_release unlocked;
            recorder.end_pass_slots(slots);
          },
          "slots"_a,
          "Slot keys: closes the pass; batch row t goes to slot slots[t] (-1: not recorded).")
      .def(
          "end_pass_pending",
          [](RouteRecorder& recorder, std::int64_t first_row, std::int64_t num_tokens) {
            nb::gil_scoped_release unlocked;
            return recorder.end_pass_pending(first_row, num_tokens);
          },
          "first_row"_a, "num_tokens"_a,
          "Slot keys: closes the pass; batch rows [first_row, first_row + num_tokens) go to rows "
          "of their own until commit_slots() gives them their slots (SGLang's overlap "
          "scheduler knows a forward's KV slots only after the next forward is launched).")
      .def(
          "commit_slots",
          [](RouteRecorder& recorder, const routes::PendingSlots& pending,
             const std::vector<std::int64_t>& slots) {
            routes::SlotCommit committed;
            {
              nb::gil_scoped_release unlocked;
              committed = recorder.commit_slots(pending, slots);
            }
            nb::dict out;
            out["slots_out_of_range"] = committed.slots_out_of_range;
            out["slots_repeated"] = committed.slots_repeated;
            return out;
          },
          "pending"_a, "slots"_a,
          "Slot keys: the pending pass's token t now holds slot slots[t]; the rows the slots "
          "held are freed. Slots outside [0, num_slots) and all but the last token naming a slot "
          "are not committed: {'slots_out_of_range': n, 'slots_repeated': n}.")
      .def("release_pending", &RouteRecorder::release_pending, "pending"_a,
           nb::call_guard<nb::gil_scoped_release>(),
           "Slot keys: frees a pending pass's rows (a forward the engine dropped); False when it "
           "was committed or released already.")
      .def(
          "clear_slots",
          [](RouteRecorder& recorder, const std::vector<std::int64_t>& slots) {
            nb::gil_scoped_release unlocked;
            return recorder.clear_slots(slots);
          },
          "slots"_a,
          "Slot keys: `slots` now read as not recorded (their tokens' routes were lost), never "
          "as their previous tokens; returns how many were outside [0, num_slots).")
      .def(
          "read_slots",
          [](RouteRecorder& recorder, const std::vector<std::int64_t>& slots,
             std::string request_id, std::int64_t first_position) {
            nb::gil_scoped_release unlocked;
            return recorder.read_slots(slots, std::move(request_id), first_position);
          },
          "slots"_a, "request_id"_a = "", "first_position"_a = 0,
          "Slot keys: the rows of `slots` in order (-1 or never written: not valid).")
      .def("abort_pass", &RouteRecorder::abort_pass, nb::call_guard<nb::gil_scoped_release>())
      .def("take", &RouteRecorder::take, "request_id"_a, nb::call_guard<nb::gil_scoped_release>(),
           "The request's rows of ended passes not taken yet (and frees them), from its first "
           "position a pass routed; positions between routed ones come back not valid.")
      .def("finish", &RouteRecorder::finish, "request_id"_a,
           nb::call_guard<nb::gil_scoped_release>(), "take(), then forgets the request.")
      .def(
          "take_many",
          [](RouteRecorder& recorder, const std::vector<std::string>& request_ids) {
            nb::gil_scoped_release unlocked;
            return recorder.take_many(request_ids);
          },
          "request_ids"_a,
          "take() of each request, in order, their rows read in one go (CUDA: one copy and "
          "one wait for them all); a request named twice gets its rows the first time.")
      .def(
          "finish_many",
          [](RouteRecorder& recorder, const std::vector<std::string>& request_ids) {
            nb::gil_scoped_release unlocked;
            return recorder.finish_many(request_ids);
          },
          "request_ids"_a, "take_many(), then forgets the requests.")
      .def("set_placement", &RouteRecorder::set_placement, "placement"_a,
           "The placement that maps physical ids of passes beginning from now on.")
      .def("set_model", &RouteRecorder::set_model, "model"_a,
           "Names the model in every RoutedExperts handed out.")
      .def("requests", &RouteRecorder::requests)
      .def(
          "tallies", [](const RouteRecorder& recorder) { return tallies_dict(recorder.tallies()); },
          "What the recorder did: passes, tokens_recorded, tokens_without_room, "
          "tokens_already_taken, invalid_ids, layers_written_twice, tokens_held.")
      .def_prop_ro("layout", &RouteRecorder::layout)
      .def_prop_ro("topology", &RouteRecorder::topology)
      .def_prop_ro("capacity_bytes", &RouteRecorder::capacity_bytes)
      .def_prop_ro(
          "max_tokens_per_pass",
          [](const RouteRecorder& recorder) { return recorder.options().max_tokens_per_pass; })
      .def_prop_ro("capacity_tokens", [](const RouteRecorder& recorder) {
        return recorder.options().capacity_tokens;
      });

  add_route_recorder<routes::CpuRouteRecorder>(module, "CpuRouteRecorder",
                                               "The route recorder for host arrays.");
#ifdef MOESTAT_HAS_CUDA
  add_route_recorder<routes::CudaRouteRecorder>(
      module, "CudaRouteRecorder",
      "The route recorder for CUDA arrays, on the current device: layer hooks only enqueue a "
      "kernel (capturable in a CUDA graph); begin_pass/end_pass run on the host around replays.")
      .def(
          "set_stream",
          [](routes::CudaRouteRecorder& recorder, std::uintptr_t stream) {
            recorder.set_stream(reinterpret_cast<cudaStream_t>(stream));
          },
          "stream"_a,
          "The stream hooks and begin/end_pass enqueue on: torch.cuda.current_stream()"
          ".cuda_stream.");
#endif
}

}  // namespace moestat::python
