// Statistics files in every format moestat knows (.pt as SGLang writes it, .safetensors,
// .json), chosen by the file's contents when reading and its extension when writing.
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>

#include <cmath>
#include <moestat/error.hpp>
#include <moestat/io/json.hpp>
#include <moestat/io/sglang.hpp>
#include <moestat/io/statistics.hpp>

#include "arrays.hpp"
#include "bindings.hpp"

namespace moestat::python {

using namespace nb::literals;

namespace {

std::size_t size(std::int64_t value) { return static_cast<std::size_t>(value); }

io::LogicalCounts counts_of(const AnyArray& array) {
  std::vector<std::int64_t> shape;
  const std::vector<double> values = doubles_of(array, "counts", shape);
  MOESTAT_CHECK(shape.size() == 2 || shape.size() == 3,
                "counts: expected [layers, experts] or [passes, layers, experts], got {} axes",
                shape.size());
  io::LogicalCounts counts;
  counts.has_window_axis = shape.size() == 3;
  counts.window_size = counts.has_window_axis ? shape[0] : 1;
  counts.num_layers = shape[shape.size() - 2];
  counts.num_experts = shape[shape.size() - 1];
  counts.counts.reserve(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    // 2^63 bounds the conversion below, which is undefined past int64 (or for NaN).
    MOESTAT_CHECK(values[i] >= 0 && values[i] < 0x1p63 && values[i] == std::floor(values[i]),
                  "counts: entry {} ({}) is not a non-negative integer", i, values[i]);
    counts.counts.push_back(std::int64_t(values[i]));
  }
  return counts;
}

}  // namespace

void bind_files(nb::module_& module) {
  module.def(
      "file_format",
      [](const std::filesystem::path& path) {
        return std::string(io::file_format_name(io::detect_file_format(path)));
      },
      "path"_a, "'json', 'pt', 'safetensors' or 'trace', from the file's first bytes.");
  module.def(
      "read_logical_counts",
      [](const std::filesystem::path& path) {
        io::LogicalCounts counts = [&] {
          nb::gil_scoped_release unlocked;
          return io::read_logical_counts(path);
        }();
        if (!counts.has_window_axis) {
          return to_numpy(std::move(counts.counts),
                          {size(counts.num_layers), size(counts.num_experts)});
        }
        return to_numpy(
            std::move(counts.counts),
            {size(counts.window_size), size(counts.num_layers), size(counts.num_experts)});
      },
      "path"_a,
      "Logical counts as int64 [passes, layers, experts] ([layers, experts] when the file "
      "has no pass axis) from an SGLang stat, per-pass or per-token dump (.pt), a moestat "
      "snapshot or {'logical_count'} JSON, or a .safetensors file. Raises moestat.Error "
      "naming the file and the problem.");
  module.def(
      "write_logical_counts",
      [](const std::filesystem::path& path, const AnyArray& counts) {
        const io::LogicalCounts value = counts_of(counts);
        nb::gil_scoped_release unlocked;
        io::write_logical_counts(path, value);
      },
      "path"_a, "counts"_a,
      "Writes [layers, experts] or [passes, layers, experts] counts by extension: .pt an "
      "SGLang stat dump, .json {'logical_count'}, .safetensors. Atomic.");
  module.def("read_placement", &io::read_placement, "path"_a, "num_logical_experts"_a = 0,
             "version"_a = 0, nb::call_guard<nb::gil_scoped_release>(),
             "A Placement from {'physical_to_logical_map'} in .pt, .json or .safetensors.");
  module.def("write_placement", &io::write_placement, "path"_a, "placement"_a,
             nb::call_guard<nb::gil_scoped_release>(),
             "Writes {'physical_to_logical_map'} by extension; a .pt is what SGLang's "
             "--init-expert-location reads. Atomic.");
  module.def(
      "write_sglang_dump",
      [](const Snapshot& snapshot, const Placement& placement, std::int64_t rank,
         const std::filesystem::path& directory) {
        return io::write_sglang_dump(snapshot, placement, rank, directory);
      },
      "snapshot"_a, "placement"_a, "rank"_a = 0, "directory"_a = std::filesystem::path(),
      nb::call_guard<nb::gil_scoped_release>(),
      "Writes the SGLang dump of the snapshot's mode (stat, per_pass or per_token) named and "
      "placed as SGLang names it (directory: $SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR, else "
      "/tmp). Returns the path.");
}

}  // namespace moestat::python
