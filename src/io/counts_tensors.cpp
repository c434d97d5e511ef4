// Logical counts as named tensors: {"logical_count": [W, L, E] or [L, E]}, read also from
// fiddler's "expert_popularity" [L, E], with what a source says of each pass where it says it.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <moestat/error.hpp>
#include <optional>

#include "payload_mappings.hpp"

namespace moestat::io::detail {
namespace {

constexpr std::string_view kTensorName = "logical_count";
constexpr std::array<Level, 3> kLevels{
    {{"passes", "pass"}, {"layers", "layer"}, {"experts", "expert"}}};
constexpr std::array<TensorForm, 2> kForms{{
    {kTensorName, kLevels, 1, Element::kCount},
    // fiddler's Mixtral statistics, one row per layer.
    {"expert_popularity", std::span(kLevels).subspan(1), 0, Element::kCount},
}};

// What a source says of each pass, [W] each.
constexpr std::string_view kPassIds = "pass_ids";
constexpr std::string_view kPlacementVersions = "placement_versions";
constexpr std::string_view kPassNumTokens = "pass_num_tokens";

/// A whole value that fits int64, else nothing.
std::optional<std::int64_t> whole(double value) {
  constexpr double kLimit = 9223372036854775808.0;  // 2^63
  if (std::trunc(value) != value || value < -kLimit || value >= kLimit) return std::nullopt;
  return std::int64_t(value);
}

std::vector<double> floating_values(const HostTensor& tensor) {
  if (tensor.dtype == DType::kFloat64) return tensor.values<double>();
  const std::vector<float> narrow = tensor.values<float>();
  return {narrow.begin(), narrow.end()};
}

/// Counts from a tensor of any of the forms' shapes. Floating-point entries are counts
/// when every one is whole (SGLang's published statistics write "12.0"); otherwise they
/// are fractional loads, kept only where `fractions` asks.
CountWindow counts_from_tensor(const HostTensor& tensor, std::string_view name,
                               const TensorForm& form, Fractions fractions) {
  const std::size_t most = form.levels.size();
  const std::size_t least = most - form.optional_levels;
  const auto shape_text = [&](std::size_t dims) {
    std::vector<std::string_view> names;
    for (const Level& level : form.levels.subspan(most - dims)) names.push_back(level.plural);
    return fmt::format("[{}]", fmt::join(names, ", "));
  };
  MOESTAT_CHECK(tensor.shape.size() >= least && tensor.shape.size() <= most,
                "{} has {} dimensions, expected {}{}", name, tensor.shape.size(), shape_text(least),
                least < most ? " or " + shape_text(most) : "");
  CountWindow out;
  out.has_window_axis = tensor.shape.size() == kLevels.size();
  out.window_size = out.has_window_axis ? tensor.shape[0] : 1;
  out.num_layers = tensor.shape[tensor.shape.size() - 2];
  out.num_experts = tensor.shape.back();
  if (tensor.dtype != DType::kFloat32 && tensor.dtype != DType::kFloat64) {
    out.counts = integer_tensor(tensor, name, tensor.shape.size());
    return out;
  }
  const std::vector<double> values = floating_values(tensor);
  out.counts.reserve(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::optional<std::int64_t> count = whole(values[i]);
    if (count) {
      out.counts.push_back(*count);
      continue;
    }
    MOESTAT_CHECK(fractions == Fractions::kKeep && std::isfinite(values[i]),
                  "{} is {}, expected an integer", element_name(name, tensor.shape, i), values[i]);
    out.counts.clear();
    out.fractional_counts = values;
    break;
  }
  return out;
}

/// The pass field `name`, [W] integers, or empty when the tensors do not hold it.
std::vector<std::int64_t> pass_field(const NamedTensors& tensors, std::string_view name) {
  const HostTensor* tensor = tensors.find(name);
  return tensor == nullptr ? std::vector<std::int64_t>{} : integer_tensor(*tensor, name, 1);
}

void add_pass_field(NamedTensors& tensors, std::string_view name,
                    std::span<const std::int64_t> values) {
  if (values.empty()) return;
  tensors.tensors.emplace_back(name,
                               HostTensor::of<std::int64_t>({std::int64_t(values.size())}, values));
}

NamedTensors counts_to_tensors(const StatisticsFile& file) {
  NamedTensors out;
  out.metadata["format"] = "moestat.logical_count";
  out.tensors.emplace_back(kTensorName, logical_count_tensor(std::get<CountWindow>(file)));
  return out;
}

StatisticsFile counts_from_tensors(const NamedTensors& tensors, const ReadOptions& options) {
  // Not a structured binding: clang before 16 does not let a lambda capture one.
  const std::pair<std::string_view, const HostTensor*> payload =
      payload_tensor(kCountsMapping, tensors);
  const std::string_view name = payload.first;
  const HostTensor* tensor = payload.second;
  const TensorForm& form = *std::find_if(kForms.begin(), kForms.end(),
                                         [&](const TensorForm& f) { return f.name == name; });
  CountWindow out = counts_from_tensor(*tensor, name, form, options.fractions);
  out.pass_rows.pass_ids = pass_field(tensors, kPassIds);
  // Versions are uint64: their bits, as window_tensors wrote them.
  const std::vector<std::int64_t> versions = pass_field(tensors, kPlacementVersions);
  out.pass_rows.placement_versions.assign(versions.begin(), versions.end());
  out.pass_rows.pass_num_tokens = pass_field(tensors, kPassNumTokens);
  out.validate(name);
  return out;
}

}  // namespace

const PayloadMapping kCountsMapping{StatisticsKind::kLogicalCounts, kForms, counts_to_tensors,
                                    counts_from_tensors};

HostTensor logical_count_tensor(const CountWindow& counts) {
  counts.validate(kTensorName);
  counts.require_whole_counts(kTensorName);
  std::vector<std::int64_t> shape{counts.num_layers, counts.num_experts};
  if (counts.has_window_axis) shape.insert(shape.begin(), counts.window_size);
  return count_tensor(std::move(shape), counts.counts);
}

HostTensor count_tensor(std::vector<std::int64_t> shape, std::span<const std::int64_t> values) {
  const bool fits = std::all_of(values.begin(), values.end(), [](std::int64_t value) {
    return value >= std::numeric_limits<std::int32_t>::min() &&
           value <= std::numeric_limits<std::int32_t>::max();
  });
  if (!fits) return HostTensor::of<std::int64_t>(std::move(shape), values);
  const std::vector<std::int32_t> narrow(values.begin(), values.end());
  return HostTensor::of<std::int32_t>(std::move(shape), narrow);
}

NamedTensors window_tensors(const CountWindow& counts) {
  NamedTensors out;
  out.tensors.emplace_back(kTensorName, logical_count_tensor(counts));
  const PassRows& passes = counts.pass_rows;
  add_pass_field(out, kPassIds, passes.pass_ids);
  const std::vector<std::int64_t> versions(passes.placement_versions.begin(),
                                           passes.placement_versions.end());
  add_pass_field(out, kPlacementVersions, versions);
  add_pass_field(out, kPassNumTokens, passes.pass_num_tokens);
  return out;
}

}  // namespace moestat::io::detail
