// GPU loads and balancedness of passes on the host: the CPU recorder's gpu_loads_since (and
// the CUDA recorder's where the passes are already on the host). The CUDA window ring reduces
// on the device with the same formula (src/record/cuda/gpu_loads_kernels.cu).
#include <algorithm>
#include <moestat/checked_math.hpp>
#include <moestat/error.hpp>
#include <moestat/gpu_loads.hpp>

namespace moestat {
namespace {

// SGLang's guard against empty layers: an empty layer scores (0 + eps) / (0 + eps) = 1.
constexpr double kBalancednessEpsilon = 1e-5;

}  // namespace

std::int64_t slots_per_gpu(std::int64_t num_physical_experts, std::int64_t num_gpus) {
  MOESTAT_CHECK(num_gpus >= 1, "the number of GPUs must be at least 1, not {}", num_gpus);
  MOESTAT_CHECK(num_physical_experts % num_gpus == 0,
                "{} GPUs cannot share {} physical expert slots evenly", num_gpus,
                num_physical_experts);
  return num_physical_experts / num_gpus;
}

std::vector<std::int64_t> gpu_loads_of_counts(std::span<const std::int64_t> physical_counts,
                                              std::int64_t num_physical_experts,
                                              std::int64_t num_gpus) {
  const std::int64_t gpu_slots = slots_per_gpu(num_physical_experts, num_gpus);
  MOESTAT_CHECK(
      num_physical_experts > 0 && physical_counts.size() % std::size_t(num_physical_experts) == 0,
      "GPU loads: {} counts do not fill rows of {} slots", physical_counts.size(),
      num_physical_experts);
  const std::size_t num_rows = physical_counts.size() / std::size_t(num_physical_experts);
  std::vector<std::int64_t> loads(num_rows * std::size_t(num_gpus), 0);
  for (std::size_t row = 0; row < num_rows; ++row) {
    const std::int64_t* counts = physical_counts.data() + row * std::size_t(num_physical_experts);
    std::int64_t* row_loads = loads.data() + row * std::size_t(num_gpus);
    for (std::int64_t slot = 0; slot < num_physical_experts; ++slot) {
      std::int64_t& load = row_loads[slot / gpu_slots];
      load = checked_add(load, counts[slot], "a GPU load");
    }
  }
  return loads;
}

double pass_balancedness(std::span<const std::int64_t> gpu_loads, std::int64_t num_gpus) {
  MOESTAT_CHECK(num_gpus > 0 && gpu_loads.size() % std::size_t(num_gpus) == 0,
                "pass balancedness: {} GPU loads do not fill rows of {} GPUs", gpu_loads.size(),
                num_gpus);
  const std::int64_t num_layers = std::int64_t(gpu_loads.size()) / num_gpus;
  if (num_layers == 0) return 1.0;
  // NOTE: the device kernel (gpu_loads_kernels.cu) repeats these operations in this order, so
  // the CUDA recorder's values are bit-equal to these.
  double sum = 0.0;
  for (std::int64_t layer = 0; layer < num_layers; ++layer) {
    const auto row = gpu_loads.begin() + layer * num_gpus;
    double total = 0.0;
    for (auto load = row; load != row + num_gpus; ++load) total += double(*load);
    const double max = double(*std::max_element(row, row + num_gpus));
    sum += (total / double(num_gpus) + kBalancednessEpsilon) / (max + kBalancednessEpsilon);
  }
  return sum / double(num_layers);
}

GpuLoadsSince gpu_loads_of(const PassesSince& passes, std::int64_t num_gpus) {
  const std::int64_t num_layers = passes.num_layers;
  GpuLoadsSince out;
  out.num_layers = num_layers;
  out.num_logical_experts = passes.num_logical_experts;
  out.num_gpus = num_gpus;
  out.arrival_range() = passes.arrival_range();
  out.pass_rows() = passes.pass_rows();
  out.tallies() = passes.tallies();

  out.gpu_loads =
      gpu_loads_of_counts(passes.physical_counts, passes.num_physical_experts, num_gpus);
  const std::size_t pass_loads = std::size_t(num_layers * num_gpus);
  for (std::int64_t pass = 0; pass < passes.size(); ++pass) {
    out.balancedness.push_back(pass_balancedness(
        std::span(out.gpu_loads).subspan(std::size_t(pass) * pass_loads, pass_loads), num_gpus));
  }

  const std::size_t logical_size = std::size_t(num_layers * passes.num_logical_experts);
  out.logical_totals.assign(logical_size, 0);
  for (std::size_t cell = 0; cell < passes.logical_counts.size(); ++cell) {
    std::int64_t& total = out.logical_totals[cell % logical_size];
    total = checked_add(total, passes.logical_counts[cell], "a logical total");
  }
  return out;
}

}  // namespace moestat
