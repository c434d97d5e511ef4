// ModelTopology, Placement and Snapshot as Python classes; arrays come out as numpy arrays
// with their documented shapes.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <limits>
#include <moestat/error.hpp>
#include <moestat/placement.hpp>
#include <moestat/snapshot.hpp>
#include <moestat/topology.hpp>

#include "arguments.hpp"
#include "arrays.hpp"
#include "bindings.hpp"

namespace moestat::python {

using namespace nb::literals;

namespace {

std::size_t size(std::int64_t value) { return static_cast<std::size_t>(value); }

template <typename T>
std::vector<T> to_vector(std::span<const T> values) {
  return {values.begin(), values.end()};
}

constexpr const char* kTopology = "ModelTopology";

std::optional<std::int64_t> optional_int_argument(nb::handle value, const char* function,
                                                  const char* argument) {
  if (value.is_none()) return std::nullopt;
  return integer_argument<std::int64_t>(value, function, argument);
}

/// moe_layers: None (every layer), or a sequence of bools (numpy's too, as in a bool array).
std::vector<bool> moe_layers_argument(nb::handle value, std::int64_t num_layers) {
  std::vector<bool> out;
  if (value.is_none()) return std::vector<bool>(num_layers > 0 ? size(num_layers) : 0, true);
  if (nb::try_cast(value, out)) return out;
  if (!PySequence_Check(value.ptr()) || nb::isinstance<nb::str>(value) ||
      nb::isinstance<nb::bytes>(value)) {
    raise_argument_type(kTopology, "moe_layers", "None or a sequence of bools, one per layer",
                        value);
  }
  const nb::sequence items = nb::borrow<nb::sequence>(value);
  const std::size_t count = nb::len(items);
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const nb::object item = items[i];
    const std::string type = python_type_name(item);
    if (item.ptr() != Py_True && item.ptr() != Py_False && type != "numpy.bool" &&
        type != "numpy.bool_") {
      raise_argument_type(kTopology, fmt::format("moe_layers[{}]", i).c_str(), "a bool", item);
    }
    out.push_back(PyObject_IsTrue(item.ptr()) == 1);
  }
  return out;
}

ModelTopology make_topology(nb::handle num_layers, nb::handle num_logical_experts, nb::handle top_k,
                            nb::handle num_physical_experts, nb::handle moe_layers,
                            nb::handle ep_size, nb::handle num_nodes, nb::handle num_groups,
                            nb::handle num_shared_expert_slots) {
  ModelTopology topology;
  topology.num_layers = integer_argument<std::int64_t>(num_layers, kTopology, "num_layers");
  topology.num_logical_experts =
      integer_argument<std::int64_t>(num_logical_experts, kTopology, "num_logical_experts");
  topology.num_physical_experts =
      optional_int_argument(num_physical_experts, kTopology, "num_physical_experts")
          .value_or(topology.num_logical_experts);
  topology.top_k = integer_argument<std::int64_t>(top_k, kTopology, "top_k");
  topology.moe_layers = moe_layers_argument(moe_layers, topology.num_layers);
  topology.ep_size = integer_argument<std::int64_t>(ep_size, kTopology, "ep_size");
  topology.num_nodes = integer_argument<std::int64_t>(num_nodes, kTopology, "num_nodes");
  topology.num_groups = integer_argument<std::int64_t>(num_groups, kTopology, "num_groups");
  topology.num_shared_expert_slots =
      integer_argument<std::int64_t>(num_shared_expert_slots, kTopology, "num_shared_expert_slots");
  topology.validate();
  return topology;
}

Placement make_placement(nb::handle physical_to_logical_argument,
                         nb::handle num_logical_experts_argument, nb::handle version_argument) {
  constexpr const char* kPlacement = "Placement";
  const AnyArray physical_to_logical =
      array_argument(physical_to_logical_argument, kPlacement, "physical_to_logical",
                     "of integer expert ids, [layers, slots]");
  std::int64_t num_logical_experts = integer_argument<std::int64_t>(
      num_logical_experts_argument, kPlacement, "num_logical_experts");
  const auto version = integer_argument<std::uint64_t>(version_argument, kPlacement, "version");
  std::vector<std::int64_t> shape;
  const auto values = doubles_of(physical_to_logical, "physical_to_logical", shape);
  MOESTAT_CHECK(shape.size() == 2, "physical_to_logical: expected [layers, slots], got {} axes",
                shape.size());
  std::vector<std::int32_t> map(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    // Range first: converting a double outside int32 (or NaN) to int32 is undefined.
    MOESTAT_CHECK(values[i] >= 0 && values[i] < double(std::numeric_limits<std::int32_t>::max()) &&
                      values[i] == std::floor(values[i]),
                  "physical_to_logical: entry {} ({}) is not an expert id", i, values[i]);
    map[i] = std::int32_t(values[i]);
  }
  if (num_logical_experts <= 0) {
    std::int32_t largest = -1;
    for (const std::int32_t id : map) largest = std::max(largest, id);
    num_logical_experts = largest + 1;
  }
  return Placement(shape[0], shape[1], num_logical_experts, std::move(map), version);
}

}  // namespace

void bind_model(nb::module_& module) {
  nb::class_<ModelTopology>(module, "ModelTopology",
                            "Layers, experts and expert-parallel ranks of an MoE model. Layers "
                            "count every decoder layer, dense ones included.")
      .def(
          "__init__",
          [](ModelTopology* self, nb::handle num_layers, nb::handle num_logical_experts,
             nb::handle top_k, nb::handle num_physical_experts, nb::handle moe_layers,
             nb::handle ep_size, nb::handle num_nodes, nb::handle num_groups,
             nb::handle num_shared_expert_slots) {
            new (self) ModelTopology(make_topology(num_layers, num_logical_experts, top_k,
                                                   num_physical_experts, moe_layers, ep_size,
                                                   num_nodes, num_groups, num_shared_expert_slots));
          },
          "num_layers"_a.none(), "num_logical_experts"_a.none(), "top_k"_a.none(), nb::kw_only(),
          "num_physical_experts"_a.none() = nb::none(), "moe_layers"_a.none() = nb::none(),
          "ep_size"_a.none() = 1, "num_nodes"_a.none() = 1, "num_groups"_a.none() = 1,
          "num_shared_expert_slots"_a.none() = 0,
          nb::sig("def __init__(self, num_layers: int, num_logical_experts: int, top_k: int, *, "
                  "num_physical_experts: int | None = None, moe_layers: "
                  "collections.abc.Sequence[bool] | None = "
                  "None, ep_size: int = 1, num_nodes: int = 1, num_groups: int = 1, "
                  "num_shared_expert_slots: int = 0) -> None"),
          "num_physical_experts defaults to num_logical_experts and moe_layers to every "
          "layer. Raises moestat.Error naming the first inconsistent field.")
      .def_static("uniform", &ModelTopology::uniform, "num_layers"_a, "num_experts"_a, "top_k"_a,
                  "Every layer MoE, no replicas, one rank.")
      .def_ro("num_layers", &ModelTopology::num_layers)
      .def_ro("moe_layers", &ModelTopology::moe_layers)
      .def_ro("num_logical_experts", &ModelTopology::num_logical_experts)
      .def_ro("num_physical_experts", &ModelTopology::num_physical_experts)
      .def_ro("top_k", &ModelTopology::top_k)
      .def_ro("ep_size", &ModelTopology::ep_size)
      .def_ro("num_nodes", &ModelTopology::num_nodes)
      .def_ro("num_groups", &ModelTopology::num_groups)
      .def_ro("num_shared_expert_slots", &ModelTopology::num_shared_expert_slots)
      .def("__eq__", [](const ModelTopology& a, const ModelTopology& b) { return a == b; })
      .def("__repr__", [](const ModelTopology& t) {
        return fmt::format(
            "ModelTopology(num_layers={}, num_logical_experts={}, top_k={}, "
            "num_physical_experts={}, moe_layers={} of {}, ep_size={}, num_nodes={}, "
            "num_groups={})",
            t.num_layers, t.num_logical_experts, t.top_k, t.num_physical_experts,
            t.num_moe_layers(), t.num_layers, t.ep_size, t.num_nodes, t.num_groups);
      });

  nb::class_<Placement>(module, "Placement",
                        "Which logical expert each physical slot holds, per layer "
                        "(SGLang's physical_to_logical_map).")
      .def(
          "__init__",
          [](Placement* self, nb::handle physical_to_logical, nb::handle num_logical_experts,
             nb::handle version) {
            new (self) Placement(make_placement(physical_to_logical, num_logical_experts, version));
          },
          "physical_to_logical"_a.none(), "num_logical_experts"_a.none() = 0,
          "version"_a.none() = 0,
          nb::sig("def __init__(self, physical_to_logical: " MOESTAT_STUB_ARRAY
                  ", num_logical_experts: int = 0, version: int = 0) -> None"),
          "physical_to_logical: [layers, slots] integer array. num_logical_experts 0 takes "
          "the largest id + 1. Raises moestat.Error unless every layer holds every expert.")
      .def_static("trivial", &Placement::trivial, "num_layers"_a, "num_physical_experts"_a,
                  "num_logical_experts"_a, "version"_a = 0,
                  "Slot p holds expert p % num_logical_experts in every layer.")
      .def_prop_ro("num_layers", &Placement::num_layers)
      .def_prop_ro("num_physical_experts", &Placement::num_physical_experts)
      .def_prop_ro("num_logical_experts", &Placement::num_logical_experts)
      .def_prop_ro("version", &Placement::version)
      .def_prop_ro(
          "physical_to_logical",
          [](const Placement& p) {
            return to_numpy(to_vector(p.physical_to_logical()),
                            {size(p.num_layers()), size(p.num_physical_experts())});
          },
          "[layers, slots] int32")
      .def_prop_ro(
          "logical_to_physical",
          [](const Placement& p) {
            return to_numpy(
                to_vector(p.logical_to_physical()),
                {size(p.num_layers()), size(p.num_logical_experts()), size(p.max_replicas())});
          },
          "[layers, experts, max replicas] int32: each expert's slots ascending, -1 padded")
      .def_prop_ro(
          "replica_counts",
          [](const Placement& p) {
            return to_numpy(to_vector(p.replica_counts()),
                            {size(p.num_layers()), size(p.num_logical_experts())});
          },
          "[layers, experts] int32")
      .def("__repr__", [](const Placement& p) {
        return fmt::format(
            "Placement(num_layers={}, num_physical_experts={}, "
            "num_logical_experts={}, version={})",
            p.num_layers(), p.num_physical_experts(), p.num_logical_experts(), p.version());
      });

  nb::class_<Snapshot>(module, "Snapshot",
                       "A consistent copy of what a recorder holds (never half a pass).")
      .def_prop_ro("mode", [](const Snapshot& s) { return std::string(record_mode_name(s.mode)); })
      .def_ro("approximate", &Snapshot::approximate)
      .def_ro("num_layers", &Snapshot::num_layers)
      .def_ro("num_logical_experts", &Snapshot::num_logical_experts)
      .def_ro("num_physical_experts", &Snapshot::num_physical_experts)
      .def_ro("top_k", &Snapshot::top_k)
      .def_ro("num_passes", &Snapshot::num_passes)
      .def_ro("dropped_ids", &Snapshot::dropped_ids)
      .def_ro("dropped_tokens", &Snapshot::dropped_tokens)
      .def_ro("dropped_passes", &Snapshot::dropped_passes)
      .def_prop_ro("window_size", &Snapshot::window_size)
      .def_prop_ro("num_tokens", &Snapshot::num_tokens)
      .def_prop_ro(
          "pass_ids",
          [](const Snapshot& s) { return to_numpy(s.pass_ids, {size(s.window_size())}); },
          "[W] int64, the ids given to begin_pass, oldest first")
      .def_prop_ro(
          "placement_versions",
          [](const Snapshot& s) { return to_numpy(s.placement_versions, {size(s.window_size())}); },
          "[W] uint64")
      .def_prop_ro(
          "pass_num_tokens",
          [](const Snapshot& s) { return to_numpy(s.pass_num_tokens, {size(s.window_size())}); },
          "[W] int64, the most valid tokens one layer of the pass got")
      .def_prop_ro(
          "logical_counts",
          [](const Snapshot& s) {
            return to_numpy(s.logical_counts, {size(s.window_size()), size(s.num_layers),
                                               size(s.num_logical_experts)});
          },
          "[W, L, E] int64 token assignments per pass")
      .def_prop_ro(
          "physical_counts",
          [](const Snapshot& s) {
            return to_numpy(s.physical_counts, {size(s.window_size()), size(s.num_layers),
                                                size(s.num_physical_experts)});
          },
          "[W, L, P] int64")
      .def_prop_ro(
          "decayed_logical_load",
          [](const Snapshot& s) {
            const auto rows = s.decayed_logical_load.empty() ? 0 : s.num_layers;
            return to_numpy(s.decayed_logical_load, {size(rows), size(s.num_logical_experts)});
          },
          "[L, E] float64 (decayed mode; empty otherwise)")
      .def_prop_ro(
          "decayed_physical_load",
          [](const Snapshot& s) {
            const auto rows = s.decayed_physical_load.empty() ? 0 : s.num_layers;
            return to_numpy(s.decayed_physical_load, {size(rows), size(s.num_physical_experts)});
          },
          "[L, P] float64 (decayed mode; empty otherwise)")
      .def_prop_ro(
          "token_pass_ids",
          [](const Snapshot& s) { return to_numpy(s.token_pass_ids, {size(s.num_tokens())}); },
          "[N] int64 (per_token mode)")
      .def_prop_ro(
          "token_physical_ids",
          [](const Snapshot& s) {
            return to_numpy(s.token_physical_ids,
                            {size(s.num_tokens()), size(s.num_layers), size(s.top_k)});
          },
          "[N, L, top_k] int32, -1 where nothing was recorded (per_token mode)")
      .def_prop_ro(
          "token_logical_ids",
          [](const Snapshot& s) {
            return to_numpy(s.token_logical_ids,
                            {size(s.num_tokens()), size(s.num_layers), size(s.top_k)});
          },
          "[N, L, top_k] int32 (per_token mode)")
      .def(
          "logical_totals",
          [](const Snapshot& s) {
            return to_numpy(s.logical_totals(), {size(s.num_layers), size(s.num_logical_experts)});
          },
          "[L, E] int64 counts summed over the window (or the kept tokens)")
      .def(
          "physical_totals",
          [](const Snapshot& s) {
            return to_numpy(s.physical_totals(),
                            {size(s.num_layers), size(s.num_physical_experts)});
          },
          "[L, P] int64")
      .def("__repr__", [](const Snapshot& s) {
        return fmt::format(
            "Snapshot(mode={}, window_size={}, num_passes={}, num_tokens={}, "
            "dropped_ids={})",
            record_mode_name(s.mode), s.window_size(), s.num_passes, s.num_tokens(), s.dropped_ids);
      });
}

}  // namespace moestat::python
