// The recorders. Hooks take any array (numpy or torch, via DLPack) without copying; the CPU
// recorder reads host arrays, the CUDA recorder device arrays on the stream set_stream gave.
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <moestat/error.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/recorder.hpp>
#ifdef MOESTAT_HAS_CUDA
#include <moestat/record/cuda_recorder.hpp>
#endif

#include <variant>
#include <vector>

#include "arguments.hpp"
#include "arrays.hpp"
#include "bindings.hpp"

namespace moestat::python {

using namespace nb::literals;

namespace {

constexpr const char* kIds = "of int32/int64 physical expert ids";

/// num_valid_tokens: None, an int, or a one-element array.
using ValidTokens = std::optional<std::variant<std::int64_t, AnyArray>>;

ValidTokens valid_tokens_argument(nb::handle value, const char* function) {
  // The common cases first, without the variant caster's two rounds.
  if (value.is_none()) return std::nullopt;
  if (PyLong_CheckExact(value.ptr()))
    return integer_argument<std::int64_t>(value, function, "num_valid_tokens");
  ValidTokens out;
  if (nb::try_cast(value, out)) [[likely]] {
    return out;
  }
  raise_argument_type(function, "num_valid_tokens",
                      fmt::format("None, an int or {} holding one int32/int64 count", kArrayKinds),
                      value);
}

void record_topk(Recorder& recorder, nb::handle layer_argument, nb::handle ids_argument,
                 nb::handle valid_argument) {
  const auto layer = integer_argument<std::int64_t>(layer_argument, "record_topk", "layer");
  const TensorView ids =
      view_of(array_argument(ids_argument, "record_topk", "topk_ids", kIds), "topk_ids");
  const ValidTokens num_valid_tokens = valid_tokens_argument(valid_argument, "record_topk");
  if (!num_valid_tokens) {
    nb::gil_scoped_release unlocked;
    recorder.record_topk(layer, ids);
  } else if (const auto* rows = std::get_if<std::int64_t>(&*num_valid_tokens)) {
    nb::gil_scoped_release unlocked;
    recorder.record_topk(layer, ids, *rows);
  } else {
    const TensorView device_rows =
        view_of(std::get<AnyArray>(*num_valid_tokens), "num_valid_tokens");
    nb::gil_scoped_release unlocked;
    recorder.record_topk(layer, ids, device_rows);
  }
}

/// layers of record_topk_layers: a sequence of ints.
std::vector<std::int64_t> layers_argument(nb::handle value) {
  std::vector<std::int64_t> out;
  if (nb::try_cast(value, out)) [[likely]] {
    return out;
  }
  constexpr const char* kFunction = "record_topk_layers";
  if (!PySequence_Check(value.ptr()) || nb::isinstance<nb::str>(value)) {
    raise_argument_type(kFunction, "layers", "a sequence of ints (layer indices)", value);
  }
  const nb::sequence items = nb::borrow<nb::sequence>(value);
  for (std::size_t i = 0; i < nb::len(items); ++i) {
    const nb::object item = items[i];
    (void)integer_argument<std::int64_t>(item, kFunction, fmt::format("layers[{}]", i).c_str());
  }
  raise_argument_type(kFunction, "layers", "a sequence of ints (layer indices)", value);
}

/// topk_ids of record_topk_layers: a sequence of arrays, one per layer.
std::vector<AnyArray> layer_ids_argument(nb::handle value) {
  std::vector<AnyArray> out;
  if (nb::try_cast(value, out)) [[likely]] {
    return out;
  }
  constexpr const char* kFunction = "record_topk_layers";
  const std::string expected = fmt::format("a sequence of arrays {}, one per layer", kIds);
  if (!PySequence_Check(value.ptr()) || nb::isinstance<nb::str>(value)) {
    raise_argument_type(kFunction, "topk_ids", expected, value);
  }
  const nb::sequence items = nb::borrow<nb::sequence>(value);
  for (std::size_t i = 0; i < nb::len(items); ++i) {
    const nb::object item = items[i];
    (void)array_argument(item, kFunction, fmt::format("topk_ids[{}]", i).c_str(), kIds);
  }
  raise_argument_type(kFunction, "topk_ids", expected, value);
}

void record_topk_layers(Recorder& recorder, nb::handle layers_value, nb::handle ids_value,
                        nb::handle valid_argument) {
  const std::vector<std::int64_t> layers = layers_argument(layers_value);
  const std::vector<AnyArray> topk_ids = layer_ids_argument(ids_value);
  const ValidTokens num_valid_tokens = valid_tokens_argument(valid_argument, "record_topk_layers");
  MOESTAT_CHECK(layers.size() == topk_ids.size(),
                "record_topk_layers: {} layers but {} topk_ids arrays", layers.size(),
                topk_ids.size());
  std::vector<Recorder::LayerTopk> entries;
  entries.reserve(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    entries.push_back({layers[i], view_of(topk_ids[i], "topk_ids")});
  }
  if (!num_valid_tokens) {
    nb::gil_scoped_release unlocked;
    recorder.record_topk_layers(entries);
  } else if (const auto* rows = std::get_if<std::int64_t>(&*num_valid_tokens)) {
    nb::gil_scoped_release unlocked;
    recorder.record_topk_layers(entries, *rows);
  } else {
    const TensorView device_rows =
        view_of(std::get<AnyArray>(*num_valid_tokens), "num_valid_tokens");
    nb::gil_scoped_release unlocked;
    recorder.record_topk_layers(entries, device_rows);
  }
}

void record_local_counts(Recorder& recorder, nb::handle layer_argument, nb::handle counts_argument,
                         nb::handle rank_argument) {
  constexpr const char* kFunction = "record_local_counts";
  const auto layer = integer_argument<std::int64_t>(layer_argument, kFunction, "layer");
  const TensorView counts = view_of(array_argument(counts_argument, kFunction, "counts",
                                                   "of int32/int64 per-local-expert counts"),
                                    "counts");
  const auto rank = integer_argument<std::int64_t>(rank_argument, kFunction, "rank");
  nb::gil_scoped_release unlocked;
  recorder.record_local_counts(layer, counts, rank);
}

void set_placement(Recorder& recorder, nb::handle placement_argument) {
  const Placement& placement = instance_argument<Placement>(
      placement_argument, "set_placement", "placement",
      "a moestat.Placement (moestat.Placement(physical_to_logical, version=n))");
  nb::gil_scoped_release unlocked;
  recorder.set_placement(placement);
}

/// The options every recorder's constructor takes, converted with errors naming `function`.
RecorderOptions make_options(const char* function, nb::handle mode, nb::handle window_size,
                             nb::handle decay, nb::handle per_token_capacity) {
  RecorderOptions options;
  options.mode = parse_record_mode(value_argument<std::string>(
      mode, function, "mode",
      "a str ('stat', 'stat_approx', 'per_pass', 'per_token' or 'decayed')"));
  options.window_size = integer_argument<std::int64_t>(window_size, function, "window_size");
  options.decay = value_argument<double>(decay, function, "decay", "a float");
  options.per_token_capacity =
      integer_argument<std::int64_t>(per_token_capacity, function, "per_token_capacity");
  options.validate();
  return options;
}

const ModelTopology& topology_argument(nb::handle value, const char* function) {
  return instance_argument<ModelTopology>(
      value, function, "topology",
      "a moestat.ModelTopology (moestat.ModelTopology(num_layers, num_experts, top_k, ...))");
}

#ifdef MOESTAT_HAS_CUDA
/// CudaRecorder::pass_count_row as a DLPack array (array_api: an object with __dlpack__).
using PassCountRow =
    nb::ndarray<nb::array_api, std::int32_t, nb::shape<-1>, nb::device::cuda, nb::c_contig>;
#endif

constexpr const char* kModeDoc =
    "mode: 'stat' (a window of the last window_size passes; -1 keeps all), 'stat_approx' "
    "(the same, fed with DeepEP normal-dispatch counts), 'per_pass', 'per_token' (top-k ids "
    "of every token; per_token_capacity tokens kept) or 'decayed' (load = decay * load + "
    "pass).";

}  // namespace

void bind_recorders(nb::module_& module) {
  nb::class_<Recorder>(module, "Recorder",
                       "Records which experts tokens are routed to, pass by pass. Hooks "
                       "(begin_pass, record_topk, record_local_counts, end_pass) come from "
                       "the forward thread in order; control (start, stop, reset, snapshot, "
                       "set_placement) from any thread.")
      .def("begin_pass", &Recorder::begin_pass, "pass_id"_a,
           nb::call_guard<nb::gil_scoped_release>(), "Opens a pass; pass_id is kept.")
      .def("record_topk", &record_topk, "layer"_a.none(), "topk_ids"_a.none(),
           "num_valid_tokens"_a.none() = nb::none(),
           nb::sig("def record_topk(self, layer: int, topk_ids: " MOESTAT_STUB_ARRAY
                   ", num_valid_tokens: "
                   "int | " MOESTAT_STUB_ARRAY " | None = None) -> None"),
           "Counts one layer's router choices. topk_ids: [tokens, k] int32 or int64 ids of "
           "physical expert slots (numpy or torch; any strides), mapped to logical experts by "
           "the placement in force; a model without replicas passes its logical ids, which "
           "the trivial placement (the default: slot p = expert p) maps to themselves. -1 is "
           "padding; other ids outside [0, P) are dropped and tallied. num_valid_tokens: None "
           "(every row), an int, or a "
           "one-element int32/int64 array (on the device for CudaRecorder).")
      .def("record_topk_layers", &record_topk_layers, "layers"_a.none(), "topk_ids"_a.none(),
           "num_valid_tokens"_a.none() = nb::none(),
           nb::sig("def record_topk_layers(self, layers: collections.abc.Sequence[int], topk_ids: "
                   "collections.abc.Sequence[" MOESTAT_STUB_ARRAY
                   "], num_valid_tokens: int | " MOESTAT_STUB_ARRAY " | None = None) -> None"),
           "record_topk for several layers of the open pass at once: layers[i]'s ids are "
           "topk_ids[i]; num_valid_tokens as for record_topk, applied to every layer. Counts "
           "what the calls one by one would (nothing if any is invalid); CudaRecorder counts up "
           "to 64 layers in one kernel, so an engine that keeps each layer's ids until the pass "
           "ends adds one node per pass to a captured graph instead of one per layer.")
      .def("record_local_counts", &record_local_counts, "layer"_a.none(), "counts"_a.none(),
           "rank"_a.none(),
           nb::sig("def record_local_counts(self, layer: int, counts: " MOESTAT_STUB_ARRAY
                   ", rank: int) -> None"),
           "Adds one rank's per-local-expert token counts (DeepEP low-latency masked_m, or "
           "normal-dispatch host counts in stat_approx mode); trailing shared-expert slots "
           "are dropped.")
      .def("end_pass", &Recorder::end_pass, nb::call_guard<nb::gil_scoped_release>(),
           "Closes the pass and commits it.")
      .def("abort_pass", &Recorder::abort_pass, nb::call_guard<nb::gil_scoped_release>(),
           "Closes the pass without committing it: what it counted is discarded (a forward "
           "that failed part-way). Eager passes only.")
      .def("start", &Recorder::start, nb::call_guard<nb::gil_scoped_release>(),
           "Clears everything and records from the next pass.")
      .def("stop", &Recorder::stop, nb::call_guard<nb::gil_scoped_release>(),
           "Stops recording; the data stays.")
      .def("reset", &Recorder::reset, nb::call_guard<nb::gil_scoped_release>(),
           "Clears everything; recording stays as it was.")
      .def_prop_ro("is_recording", &Recorder::is_recording)
      .def("snapshot", &Recorder::snapshot, nb::call_guard<nb::gil_scoped_release>(),
           "A copy of everything recorded, logical ids resolved.")
      .def("set_placement", &set_placement, "placement"_a.none(),
           nb::sig("def set_placement(self, placement: moestat._core.Placement) -> None"),
           "Makes placement current for passes that end from now on; its version must be "
           "higher than the current one's.")
      .def_prop_ro("topology", &Recorder::topology, nb::rv_policy::reference_internal);

  nb::class_<record::CpuRecorder, Recorder>(module, "CpuRecorder", "The recorder for host arrays.")
      .def(
          "__init__",
          [](record::CpuRecorder* self, nb::handle topology, nb::handle mode,
             nb::handle window_size, nb::handle decay, nb::handle per_token_capacity) {
            constexpr const char* kFunction = "CpuRecorder";
            const ModelTopology& model = topology_argument(topology, kFunction);
            new (self) record::CpuRecorder(
                model, make_options(kFunction, mode, window_size, decay, per_token_capacity));
          },
          "topology"_a.none(), nb::kw_only(), "mode"_a.none() = "stat",
          "window_size"_a.none() = 1000, "decay"_a.none() = 0.95,
          "per_token_capacity"_a.none() = 16384,
          nb::sig("def __init__(self, topology: moestat._core.ModelTopology, *, mode: str = "
                  "'stat', window_size: int = 1000, decay: float = 0.95, per_token_capacity: "
                  "int = 16384) -> None"),
          kModeDoc);

#ifdef MOESTAT_HAS_CUDA
  nb::class_<record::CudaRecorder, Recorder>(
      module, "CudaRecorder",
      "The recorder for CUDA arrays: every buffer is allocated here, hooks only enqueue "
      "kernels on the stream given to set_stream, so they can be captured in a CUDA graph.")
      .def(
          "__init__",
          [](record::CudaRecorder* self, nb::handle topology, nb::handle mode,
             nb::handle window_size, nb::handle decay, nb::handle per_token_capacity,
             nb::handle device, nb::handle trace_path, nb::handle max_tokens_per_pass) {
            constexpr const char* kFunction = "CudaRecorder";
            const ModelTopology& model = topology_argument(topology, kFunction);
            const RecorderOptions options =
                make_options(kFunction, mode, window_size, decay, per_token_capacity);
            const int device_index = integer_argument<int>(device, kFunction, "device");
            record::CudaOptions cuda_options;
            if (!trace_path.is_none()) {
              cuda_options.trace_path = path_argument(trace_path, kFunction, "trace_path");
            }
            cuda_options.max_tokens_per_pass = integer_argument<std::int64_t>(
                max_tokens_per_pass, kFunction, "max_tokens_per_pass");
            new (self) record::CudaRecorder(model, options, device_index, cuda_options);
          },
          "topology"_a.none(), nb::kw_only(), "mode"_a.none() = "stat",
          "window_size"_a.none() = 1000, "decay"_a.none() = 0.95,
          "per_token_capacity"_a.none() = 16384, "device"_a.none() = -1,
          "trace_path"_a.none() = nb::none(), "max_tokens_per_pass"_a.none() = 8192,
          nb::sig("def __init__(self, topology: moestat._core.ModelTopology, *, mode: str = "
                  "'stat', window_size: int = 1000, decay: float = 0.95, per_token_capacity: "
                  "int = 16384, device: int = -1, trace_path: str | os.PathLike | None = None, "
                  "max_tokens_per_pass: int = 8192) -> None"),
          "device -1 is the current device; per_token mode drains into trace_path (required "
          "there).")
      .def(
          "set_stream",
          [](record::CudaRecorder& recorder, std::uintptr_t stream) {
            recorder.set_stream(reinterpret_cast<cudaStream_t>(stream));
          },
          "stream"_a,
          "The stream hooks enqueue on, as a handle: torch.cuda.current_stream().cuda_stream.")
      .def("drain_trace", &record::CudaRecorder::drain_trace,
           nb::call_guard<nb::gil_scoped_release>(),
           "per_token mode: waits until every ended pass is in the trace file.")
      .def(
          "pass_count_row",
          [](const record::CudaRecorder& recorder, std::int64_t layer) {
            // No owner here: reference_internal makes the recorder the owner, so the row
            // cannot outlive the memory it views.
            return PassCountRow(recorder.pass_count_row(layer),
                                {std::size_t(recorder.topology().num_physical_experts)},
                                nb::handle(), {}, nb::dtype<std::int32_t>(),
                                nb::device::cuda::value, recorder.device());
          },
          "layer"_a, nb::rv_policy::reference_internal,
          "The open pass's count row of a MoE layer, for an engine kernel that adds "
          "per-expert token counts itself (SGLang's get_current_pass_count_buffer): int32 [P] "
          "on the recorder's GPU, one add per routed (token, k) at its physical id. end_pass "
          "folds it into the pass; begin_pass clears it when the pass records, and what is "
          "added while no pass records is discarded. torch.from_dlpack(row) or "
          "torch.as_tensor(row) views it without a copy; the array keeps the recorder alive. "
          "Adds must come on the recorder's stream between begin_pass and end_pass; stat, "
          "per_pass and decayed modes only.");
#endif
}

}  // namespace moestat::python
