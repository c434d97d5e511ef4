// Expert masks as named tensors: {"gpu_experts_masks": bool [L, E]}.
#include <algorithm>
#include <array>
#include <moestat/error.hpp>
#include <moestat/io/sglang.hpp>

#include "payload_mappings.hpp"

namespace moestat::io {
namespace detail {
namespace {

constexpr std::string_view kTensorName = "gpu_experts_masks";
constexpr std::array<Level, 2> kLevels{{{"layers", "layer"}, {"experts", "expert"}}};
constexpr std::array<TensorForm, 1> kForms{{{kTensorName, kLevels, 0, Element::kFlag}}};

NamedTensors mask_to_tensors(const StatisticsFile& file) {
  NamedTensors out;
  out.tensors.emplace_back(kTensorName, expert_mask_tensor(std::get<ExpertMask>(file)));
  return out;
}

StatisticsFile mask_from_tensors(const NamedTensors& tensors, const ReadOptions&) {
  return expert_mask_from_tensor(*tensors.find(kTensorName));
}

}  // namespace

const PayloadMapping kExpertMaskMapping{StatisticsKind::kExpertMask, kForms, mask_to_tensors,
                                        mask_from_tensors};

}  // namespace detail

HostTensor expert_mask_tensor(const ExpertMask& mask) {
  MOESTAT_CHECK(mask.num_layers > 0 && mask.num_experts > 0 &&
                    std::int64_t(mask.on_gpu.size()) == mask.num_layers * mask.num_experts,
                "expert mask of {} flags does not fill [{}, {}]", mask.on_gpu.size(),
                mask.num_layers, mask.num_experts);
  std::vector<std::uint8_t> flags(mask.on_gpu.size());
  std::transform(mask.on_gpu.begin(), mask.on_gpu.end(), flags.begin(),
                 [](std::uint8_t flag) { return std::uint8_t(flag != 0 ? 1 : 0); });
  return HostTensor::of<std::uint8_t>({mask.num_layers, mask.num_experts}, flags);
}

ExpertMask expert_mask_from_tensor(const HostTensor& tensor) {
  const std::vector<std::int64_t> flags = detail::integer_tensor(tensor, "expert mask", 2);
  MOESTAT_CHECK(std::all_of(flags.begin(), flags.end(),
                            [](std::int64_t flag) { return flag == 0 || flag == 1; }),
                "expert mask holds values other than 0 and 1");
  return {tensor.shape[0], tensor.shape[1], std::vector<std::uint8_t>(flags.begin(), flags.end())};
}

}  // namespace moestat::io
