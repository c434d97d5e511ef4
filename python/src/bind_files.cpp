// Statistics files in every format moestat knows (.pt as SGLang writes it, .safetensors,
// .json), chosen by the file's contents when reading and its extension when writing.
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <moestat/error.hpp>
#include <moestat/io/counts_json.hpp>
#include <moestat/io/pt.hpp>
#include <moestat/io/sglang.hpp>
#include <moestat/io/statistics.hpp>
#include <optional>
#include <string>

#include "arguments.hpp"
#include "arrays.hpp"
#include "bindings.hpp"

namespace moestat::python {

using namespace nb::literals;

namespace {

std::size_t size(std::int64_t value) { return static_cast<std::size_t>(value); }

CountWindow counts_of(const AnyArray& array) {
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> values = counts_of_array(array, "counts", shape);
  MOESTAT_CHECK(shape.size() == 2 || shape.size() == 3,
                "counts: expected [layers, experts] or [passes, layers, experts], got {} axes",
                shape.size());
  CountWindow counts;
  counts.has_window_axis = shape.size() == 3;
  counts.window_size = counts.has_window_axis ? shape[0] : 1;
  counts.num_layers = shape[shape.size() - 2];
  counts.num_experts = shape[shape.size() - 1];
  counts.counts = std::move(values);
  return counts;
}

constexpr const char* kWriteSglangDump = "write_sglang_dump";

/// A Python value of what SGLang's records hold beside tensors (None, bool, int, float, str,
/// list, tuple, dict with str or int keys, nested at most PtReadLimits' depth) as a PtValue;
/// TypeError naming `what` otherwise.
io::PtValue pt_value_of(nb::handle value, const char* what, std::size_t depth = 0) {
  MOESTAT_CHECK(depth <= io::PtReadLimits{}.max_depth, "{}: {} is nested deeper than {}",
                kWriteSglangDump, what, io::PtReadLimits{}.max_depth);
  const auto items = [&](nb::handle sequence) {
    io::PtList out;
    for (nb::handle item : sequence) out.push_back(pt_value_of(item, what, depth + 1));
    return out;
  };
  if (value.is_none()) return {};
  if (nb::isinstance<nb::bool_>(value)) return nb::cast<bool>(value);
  if (nb::isinstance<nb::int_>(value)) {
    return integer_argument<std::int64_t>(value, kWriteSglangDump, what);
  }
  if (nb::isinstance<nb::float_>(value)) return nb::cast<double>(value);
  if (nb::isinstance<nb::str>(value)) return nb::cast<std::string>(value);
  if (nb::isinstance<nb::list>(value)) return items(value);
  if (nb::isinstance<nb::tuple>(value)) return io::PtTuple{items(value)};
  if (nb::isinstance<nb::dict>(value)) {
    io::PtDict out;
    for (const auto& [key, item] : nb::borrow<nb::dict>(value)) {
      if (!nb::isinstance<nb::str>(key) && !nb::isinstance<nb::int_>(key)) {
        raise_argument_type(kWriteSglangDump, what, "a dict with str or int keys", key);
      }
      out.emplace_back(pt_value_of(key, what, depth + 1), pt_value_of(item, what, depth + 1));
    }
    return out;
  }
  raise_argument_type(kWriteSglangDump, what, "None, bool, int, float, str, list, tuple or dict",
                      value);
}

/// {pass_id: {"forward_pass_id": int, "metadata": dict or None, "misc_objects": list}}, as
/// an SGLang adapter keeps its passes, as the writer's records (None: none).
std::vector<io::SglangPassRecord> pass_records_of(nb::handle passes) {
  std::vector<io::SglangPassRecord> out;
  if (passes.is_none()) return out;
  if (!nb::isinstance<nb::dict>(passes)) {
    raise_argument_type(kWriteSglangDump, "passes", "a dict of pass records or None", passes);
  }
  for (const auto& [pass_id, info] : nb::borrow<nb::dict>(passes)) {
    if (!nb::isinstance<nb::dict>(info)) {
      raise_argument_type(kWriteSglangDump, "passes", "a dict per pass", info);
    }
    const nb::dict fields = nb::borrow<nb::dict>(info);
    io::SglangPassRecord& record = out.emplace_back();
    record.pass_id = integer_argument<std::int64_t>(pass_id, kWriteSglangDump, "passes");
    MOESTAT_CHECK(fields.contains("forward_pass_id"),
                  "{}: the record of pass {} has no forward_pass_id", kWriteSglangDump,
                  record.pass_id);
    record.forward_pass_id = integer_argument<std::int64_t>(fields["forward_pass_id"],
                                                            kWriteSglangDump, "forward_pass_id");
    const nb::handle metadata = fields.contains("metadata") ? fields["metadata"] : nb::none();
    if (!metadata.is_none()) {
      if (!nb::isinstance<nb::dict>(metadata)) {
        raise_argument_type(kWriteSglangDump, "metadata", "a dict or None", metadata);
      }
      record.metadata = pt_value_of(metadata, "metadata").dict();
    }
    if (fields.contains("misc_objects")) {
      const nb::object misc = fields["misc_objects"];
      if (!nb::isinstance<nb::list>(misc)) {
        raise_argument_type(kWriteSglangDump, "misc_objects", "a list", misc);
      }
      record.misc_objects = pt_value_of(misc, "misc_objects").list();
    }
  }
  return out;
}

/// An engine's int32 or int64 counts as they are, in one copy (a stat dump's buffer is
/// W x L x E: no per-element conversion); moestat::Error for another dtype or a non-contiguous
/// or non-CPU array.
io::HostTensor engine_counts(const AnyArray& array) {
  constexpr std::string_view kWhat = "logical_count";
  const TensorView view = view_of(array, kWhat);
  view.require_cpu(kWhat);
  MOESTAT_CHECK(view.dtype() == DType::kInt32 || view.dtype() == DType::kInt64,
                "{}: expected int32 or int64 counts, got {}", kWhat, dtype_name(view.dtype()));
  MOESTAT_CHECK(view.is_contiguous(), "{}: expected a contiguous array", kWhat);
  io::HostTensor out;
  out.dtype = view.dtype();
  out.shape.assign(view.shape().begin(), view.shape().end());
  const auto* first = static_cast<const std::byte*>(view.data());
  out.data.assign(first, first + view.numel() * std::int64_t(dtype_size(view.dtype())));
  return out;
}

/// The arguments write_sglang_dump and sglang_dump_bytes share.
struct SglangDumpArguments {
  SglangDumpArguments(const char* function, nb::handle snapshot_arg, nb::handle placement_arg,
                      nb::handle rank_arg, nb::handle passes, nb::handle device)
      : snapshot(
            instance_argument<Snapshot>(snapshot_arg, function, "snapshot", "a moestat.Snapshot")),
        placement(instance_argument<Placement>(placement_arg, function, "placement",
                                               "a moestat.Placement")),
        rank(integer_argument<std::int64_t>(rank_arg, function, "rank")),
        records(pass_records_of(passes)),
        map_device(io::device_of_name(
            value_argument<std::string>(device, function, "map_device", "a str"))) {}

  const Snapshot& snapshot;
  const Placement& placement;
  std::int64_t rank;
  std::vector<io::SglangPassRecord> records;
  Device map_device;
};

/// The counts as numpy: [W, L, E], or [L, E] when the source has no window axis; int64, or
/// float64 for a fractional window.
nb::object counts_array(CountWindow& counts) {
  const auto shape = [&]<typename T>(std::vector<T>& values) {
    if (!counts.has_window_axis) {
      return to_numpy(std::move(values), {size(counts.num_layers), size(counts.num_experts)});
    }
    return to_numpy(std::move(values),
                    {size(counts.window_size), size(counts.num_layers), size(counts.num_experts)});
  };
  return counts.is_fractional() ? shape(counts.fractional_counts) : shape(counts.counts);
}

/// A [W] metadata array, or None where the source does not say.
template <typename T>
nb::object per_pass(std::vector<T>& values) {
  if (values.empty()) return nb::none();
  const std::size_t passes = values.size();
  return to_numpy(std::move(values), {passes});
}

CountWindow read_counts_released(const std::filesystem::path& file, io::Fractions fractions) {
  nb::gil_scoped_release unlocked;
  return io::read_counts(file, fractions);
}

}  // namespace

void bind_files(nb::module_& module) {
  module.def(
      "file_format",
      [](nb::handle path) {
        const std::filesystem::path file = path_argument(path, "file_format", "path");
        return std::string(io::file_format_name(io::detect_file_format(file)));
      },
      "path"_a.none(), nb::sig("def file_format(path: str | os.PathLike) -> str"),
      "'json', 'pt', 'safetensors', 'trace' or 'gguf', from the file's first bytes.");
  module.def(
      "read_counts",
      [](nb::handle path, nb::handle fractions) {
        const std::filesystem::path file = path_argument(path, "read_counts", "path");
        const bool keep = value_argument<bool>(fractions, "read_counts", "fractions", "a bool");
        CountWindow counts =
            read_counts_released(file, keep ? io::Fractions::kKeep : io::Fractions::kRefuse);
        nb::dict out;
        out["has_window_axis"] = counts.has_window_axis;
        out["counts"] = counts_array(counts);
        out["pass_ids"] = per_pass(counts.pass_rows.pass_ids);
        out["placement_versions"] = per_pass(counts.pass_rows.placement_versions);
        out["pass_num_tokens"] = per_pass(counts.pass_rows.pass_num_tokens);
        return out;
      },
      "path"_a.none(), "fractions"_a.none() = false,
      nb::sig("def read_counts(path: str | os.PathLike, fractions: bool = False) -> dict"),
      "Any counts file, as every moestat command reads it: {'counts': [passes, layers, "
      "experts] int64 ([layers, experts] when the file has no pass axis), "
      "'has_window_axis': bool, 'pass_ids', 'placement_versions', 'pass_num_tokens': [passes] "
      "arrays, or None where the file does not say}. From an SGLang stat, per-pass or "
      "per-token dump (.pt), a moestat snapshot, {'logical_count'} or {'expert_popularity'} "
      "JSON, a .safetensors file, or llama.cpp's imatrix .gguf (llama-imatrix's per-expert "
      "counts). Entries that are not whole numbers are an error unless "
      "fractions=True, which reads them as float64 loads. Raises moestat.Error naming the "
      "file and the problem.");
  module.def(
      "read_logical_counts",
      [](nb::handle path) {
        const std::filesystem::path file = path_argument(path, "read_logical_counts", "path");
        CountWindow counts = read_counts_released(file, io::Fractions::kRefuse);
        return counts_array(counts);
      },
      "path"_a.none(), nb::sig("def read_logical_counts(path: str | os.PathLike) -> object"),
      "read_counts(path)['counts']: int64 [passes, layers, experts] ([layers, experts] when "
      "the file has no pass axis). Raises moestat.Error naming the file and the problem.");
  module.def(
      "write_logical_counts",
      [](nb::handle path, nb::handle counts, nb::handle metadata) {
        constexpr const char* kFunction = "write_logical_counts";
        const std::filesystem::path file = path_argument(path, kFunction, "path");
        const CountWindow value =
            counts_of(array_argument(counts, kFunction, "counts",
                                     "of [layers, experts] or [passes, layers, experts] counts"));
        const std::optional<std::string> members =
            metadata.is_none() ? std::nullopt
                               : std::optional(value_argument<std::string>(
                                     metadata, kFunction, "metadata", "a str or None"));
        nb::gil_scoped_release unlocked;
        if (members) {
          io::write_counts(file, value, *members);
        } else {
          io::write_counts(file, value);
        }
      },
      "path"_a.none(), "counts"_a.none(), nb::kw_only(), "metadata"_a.none() = nb::none(),
      nb::sig("def write_logical_counts(path: str | os.PathLike, counts: " MOESTAT_STUB_ARRAY
              ", *, metadata: str | None = None) -> None"),
      "Writes [layers, experts] or [passes, layers, experts] counts by extension: .pt an "
      "SGLang stat dump, .json {'logical_count'}, .safetensors. metadata: a JSON object's text "
      "whose members follow logical_count in a .json file (vLLM's {'vllm_eplb': {...}}); "
      "moestat.Error for another extension, or text that is not a JSON object. Atomic.");
  module.def(
      "read_placement",
      [](nb::handle path, nb::handle num_logical_experts, nb::handle version, nb::handle num_layers,
         nb::handle num_physical_experts) {
        constexpr const char* kFunction = "read_placement";
        const std::filesystem::path file = path_argument(path, kFunction, "path");
        const auto experts =
            integer_argument<std::int64_t>(num_logical_experts, kFunction, "num_logical_experts");
        const auto placement_version =
            integer_argument<std::uint64_t>(version, kFunction, "version");
        const auto layers = integer_argument<std::int64_t>(num_layers, kFunction, "num_layers");
        const auto slots =
            integer_argument<std::int64_t>(num_physical_experts, kFunction, "num_physical_experts");
        nb::gil_scoped_release unlocked;
        return io::read_placement(file, experts, placement_version, layers, slots);
      },
      "path"_a.none(), "num_logical_experts"_a.none() = 0, "version"_a.none() = 0,
      "num_layers"_a.none() = 0, "num_physical_experts"_a.none() = 0,
      nb::sig("def read_placement(path: str | os.PathLike, num_logical_experts: int = 0, "
              "version: int = 0, num_layers: int = 0, num_physical_experts: int = 0) -> "
              "moestat._core.Placement"),
      "A Placement from {'physical_to_logical_map'} in .pt, .json or .safetensors. num_layers "
      "and num_physical_experts (0: any): the [L, P] shape required (a model's), a JSON map "
      "refused at its first row or id that breaks it, unread beyond.");
  module.def(
      "write_placement",
      [](nb::handle path, nb::handle placement) {
        constexpr const char* kFunction = "write_placement";
        const std::filesystem::path file = path_argument(path, kFunction, "path");
        const Placement& value =
            instance_argument<Placement>(placement, kFunction, "placement", "a moestat.Placement");
        nb::gil_scoped_release unlocked;
        io::write_placement(file, value);
      },
      "path"_a.none(), "placement"_a.none(),
      nb::sig("def write_placement(path: str | os.PathLike, placement: moestat._core.Placement) -> "
              "None"),
      "Writes {'physical_to_logical_map'} by extension; a .pt is what SGLang's "
      "--init-expert-location reads. Atomic.");
  module.def(
      "write_sglang_dump",
      [](nb::handle snapshot, nb::handle placement, nb::handle rank, nb::handle directory,
         nb::handle passes, nb::handle map_device) {
        constexpr const char* kFunction = kWriteSglangDump;
        const SglangDumpArguments arguments(kFunction, snapshot, placement, rank, passes,
                                            map_device);
        const std::filesystem::path directory_path =
            directory.is_none() ? std::filesystem::path()
                                : path_argument(directory, kFunction, "directory");
        nb::gil_scoped_release unlocked;
        return io::write_sglang_dump(arguments.snapshot, arguments.placement, arguments.rank,
                                     directory_path, arguments.records, arguments.map_device);
      },
      "snapshot"_a.none(), "placement"_a.none(), "rank"_a.none() = 0,
      "directory"_a.none() = nb::none(), nb::kw_only(), "passes"_a.none() = nb::none(),
      "map_device"_a.none() = "cpu",
      nb::sig("def write_sglang_dump(snapshot: moestat._core.Snapshot, placement: "
              "moestat._core.Placement, rank: int = 0, "
              "directory: str | os.PathLike | None = None, *, "
              "passes: dict | None = None, map_device: str = 'cpu') -> pathlib.Path"),
      "Writes the SGLang dump of the snapshot's mode (stat, per_pass or per_token) named and "
      "placed as SGLang names it (directory None: $SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR, "
      "else /tmp). passes: {pass_id: {'forward_pass_id': int, 'metadata': dict or None, "
      "'misc_objects': list}}, what the engine said of each recorded pass: per_pass and "
      "per_token records are then exactly SGLang's (forward_pass_id, the batch metadata, "
      "misc_objects, one per-token record per pass, as many tokens as its input_ids). "
      "map_device: 'cpu' or 'cuda:N', where the engine keeps last_physical_to_logical_map "
      "(a stat dump's logical_count), written as torch.save writes it. Returns the path.");
  module.def(
      "sglang_dump_bytes",
      [](nb::handle snapshot, nb::handle placement, nb::handle rank, nb::handle passes,
         nb::handle map_device) {
        const SglangDumpArguments arguments("sglang_dump_bytes", snapshot, placement, rank, passes,
                                            map_device);
        std::string bytes;
        {
          nb::gil_scoped_release unlocked;
          bytes = io::pt_to_bytes(io::sglang_dump(arguments.snapshot, arguments.placement,
                                                  arguments.rank, arguments.records,
                                                  arguments.map_device));
        }
        return nb::bytes(bytes.data(), bytes.size());
      },
      "snapshot"_a.none(), "placement"_a.none(), "rank"_a.none() = 0, nb::kw_only(),
      "passes"_a.none() = nb::none(), "map_device"_a.none() = "cpu",
      nb::sig("def sglang_dump_bytes(snapshot: moestat._core.Snapshot, placement: "
              "moestat._core.Placement, rank: int = 0, *, passes: dict | None = None, "
              "map_device: str = 'cpu') -> bytes"),
      "The bytes write_sglang_dump writes (torch.load reads them from io.BytesIO).");
  module.def(
      "sglang_stat_dump_bytes",
      [](nb::handle logical_count, nb::handle rank, nb::handle average, nb::handle device,
         nb::handle balancedness) {
        constexpr const char* kFunction = "sglang_stat_dump_bytes";
        io::HostTensor counts = engine_counts(array_argument(
            logical_count, kFunction, "logical_count",
            "of int32 or int64 [layers, experts] or [passes, layers, experts] counts"));
        const auto rank_value = integer_argument<std::int64_t>(rank, kFunction, "rank");
        const std::optional<double> average_value =
            average.is_none() ? std::nullopt
                              : std::optional(value_argument<double>(
                                    average, kFunction, "average_utilization", "a float or None"));
        counts.device =
            io::device_of_name(value_argument<std::string>(device, kFunction, "device", "a str"));
        std::optional<std::vector<float>> per_pass_values;
        if (!balancedness.is_none()) {
          per_pass_values = value_argument<std::vector<float>>(
              balancedness, kFunction, "eplb_balancedness", "a list of floats or None");
        }
        std::string bytes;
        {
          nb::gil_scoped_release unlocked;
          bytes = io::pt_to_bytes(io::sglang_stat_dump(std::move(counts), rank_value, average_value,
                                                       std::move(per_pass_values)));
        }
        return nb::bytes(bytes.data(), bytes.size());
      },
      "logical_count"_a.none(), "rank"_a.none() = 0, nb::kw_only(),
      "average_utilization"_a.none() = nb::none(), "device"_a.none() = "cpu",
      "eplb_balancedness"_a.none() = nb::none(),
      nb::sig("def sglang_stat_dump_bytes(logical_count: " MOESTAT_STUB_ARRAY
              ", rank: int = 0, *, average_utilization: float | None = None, device: str = "
              "'cpu', eplb_balancedness: list[float] | None = None) -> bytes"),
      "SGLang's stat dump of logical_count ([buffer, layers, experts] counts, laid out as "
      "SGLang's buffer), as the bytes of a .pt file: {'rank', 'logical_count' int32 on "
      "device ('cpu' or 'cuda:N', written as torch.save writes it), "
      "'average_utilization_rate_over_window'} and, given eplb_balancedness, that list as a "
      "float32 tensor under 'eplb_balancedness'.");
}

}  // namespace moestat::python
