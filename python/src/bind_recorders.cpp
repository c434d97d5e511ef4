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

#include "arrays.hpp"
#include "bindings.hpp"

namespace moestat::python {

using namespace nb::literals;

namespace {

void record_topk(Recorder& recorder, std::int64_t layer, const AnyArray& topk_ids,
                 const std::optional<std::variant<std::int64_t, AnyArray>>& num_valid_tokens) {
  const TensorView ids = view_of(topk_ids, "topk_ids");
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

void record_topk_layers(
    Recorder& recorder, const std::vector<std::int64_t>& layers,
    const std::vector<AnyArray>& topk_ids,
    const std::optional<std::variant<std::int64_t, AnyArray>>& num_valid_tokens) {
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

RecorderOptions make_options(const std::string& mode, std::int64_t window_size, double decay,
                             std::int64_t per_token_capacity) {
  RecorderOptions options;
  options.mode = parse_record_mode(mode);
  options.window_size = window_size;
  options.decay = decay;
  options.per_token_capacity = per_token_capacity;
  options.validate();
  return options;
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
      .def("record_topk", &record_topk, "layer"_a, "topk_ids"_a, "num_valid_tokens"_a = nb::none(),
           "Counts one layer's router choices. topk_ids: [tokens, k] int32 or int64 physical "
           "expert ids (numpy or torch; any strides); -1 is padding; other ids outside "
           "[0, P) are dropped and tallied. num_valid_tokens: None (every row), an int, or a "
           "one-element int32/int64 array (on the device for CudaRecorder).")
      .def("record_topk_layers", &record_topk_layers, "layers"_a, "topk_ids"_a,
           "num_valid_tokens"_a = nb::none(),
           "record_topk for several layers of the open pass at once: layers[i]'s ids are "
           "topk_ids[i]; num_valid_tokens as for record_topk, applied to every layer. Counts "
           "what the calls one by one would (nothing if any is invalid); CudaRecorder counts up "
           "to 64 layers in one kernel, so an engine that keeps each layer's ids until the pass "
           "ends adds one node per pass to a captured graph instead of one per layer.")
      .def(
          "record_local_counts",
          [](Recorder& recorder, std::int64_t layer, const AnyArray& counts, std::int64_t rank) {
            const TensorView view = view_of(counts, "counts");
            nb::gil_scoped_release unlocked;
            recorder.record_local_counts(layer, view, rank);
          },
          "layer"_a, "counts"_a, "rank"_a,
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
      .def("set_placement", &Recorder::set_placement, "placement"_a,
           nb::call_guard<nb::gil_scoped_release>(),
           "Makes placement current for passes that end from now on; its version must be "
           "higher than the current one's.")
      .def_prop_ro("topology", &Recorder::topology, nb::rv_policy::reference_internal);

  nb::class_<record::CpuRecorder, Recorder>(module, "CpuRecorder", "The recorder for host arrays.")
      .def(
          "__init__",
          [](record::CpuRecorder* self, const ModelTopology& topology, const std::string& mode,
             std::int64_t window_size, double decay, std::int64_t per_token_capacity) {
            new (self) record::CpuRecorder(
                topology, make_options(mode, window_size, decay, per_token_capacity));
          },
          "topology"_a, nb::kw_only(), "mode"_a = "stat", "window_size"_a = 1000, "decay"_a = 0.95,
          "per_token_capacity"_a = 16384, kModeDoc);

#ifdef MOESTAT_HAS_CUDA
  nb::class_<record::CudaRecorder, Recorder>(
      module, "CudaRecorder",
      "The recorder for CUDA arrays: every buffer is allocated here, hooks only enqueue "
      "kernels on the stream given to set_stream, so they can be captured in a CUDA graph.")
      .def(
          "__init__",
          [](record::CudaRecorder* self, const ModelTopology& topology, const std::string& mode,
             std::int64_t window_size, double decay, std::int64_t per_token_capacity, int device,
             const std::filesystem::path& trace_path, std::int64_t max_tokens_per_pass) {
            record::CudaOptions cuda_options;
            cuda_options.trace_path = trace_path;
            cuda_options.max_tokens_per_pass = max_tokens_per_pass;
            new (self) record::CudaRecorder(
                topology, make_options(mode, window_size, decay, per_token_capacity), device,
                cuda_options);
          },
          "topology"_a, nb::kw_only(), "mode"_a = "stat", "window_size"_a = 1000, "decay"_a = 0.95,
          "per_token_capacity"_a = 16384, "device"_a = -1, "trace_path"_a = std::filesystem::path(),
          "max_tokens_per_pass"_a = 8192,
          "device -1 is the current device; per_token mode drains into trace_path.")
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
