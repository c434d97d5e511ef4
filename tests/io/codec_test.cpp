// Every payload through every registered codec, driven by the two tables (payload_mappings()
// and the format registry), so a new payload or a new format is covered by its registration
// alone; and a payload no codec knows, carried by every container through a mapping only.
#include "io/codec.hpp"

#include <gtest/gtest.h>

#include <array>
#include <moestat/io/formats.hpp>
#include <moestat/io/statistics.hpp>
#include <set>

#include "io/payload_mappings.hpp"
#include "io/test_support.hpp"

namespace moestat::test {
namespace {

using io::detail::Codec;
using io::detail::PayloadMapping;

constexpr std::array kContainers{io::FileFormat::kJson, io::FileFormat::kPt,
                                 io::FileFormat::kSafetensors};

/// A payload of each kind, with nothing a format leaves out (pass metadata, a version).
io::StatisticsFile sample(io::StatisticsKind kind) {
  switch (kind) {
    case io::StatisticsKind::kLogicalCounts:
      return CountWindow{.window_size = 2,
                         .num_layers = 2,
                         .num_experts = 3,
                         .has_window_axis = true,
                         .counts = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, std::int64_t(1) << 40}};
    case io::StatisticsKind::kPlacement:
      return Placement(2, 4, 3, {0, 1, 2, 0, 2, 1, 0, 1});
    case io::StatisticsKind::kExpertMask:
      return ExpertMask{2, 3, {1, 0, 1, 0, 0, 1}};
  }
  ADD_FAILURE() << "no sample of kind " << int(kind);
  return {};
}

bool same(const io::StatisticsFile& a, const io::StatisticsFile& b) {
  if (a.index() != b.index()) return false;
  if (const auto* placement = std::get_if<Placement>(&a)) {
    return placement->same_maps(std::get<Placement>(b));
  }
  if (const auto* counts = std::get_if<CountWindow>(&a)) return *counts == std::get<CountWindow>(b);
  return std::get<ExpertMask>(a) == std::get<ExpertMask>(b);
}

TEST(Codecs, EveryPayloadRoundTripsThroughEveryContainerAndIsDetected) {
  for (const PayloadMapping* mapping : io::detail::payload_mappings()) {
    const io::StatisticsFile payload = sample(mapping->kind);
    for (const io::FileFormat format : kContainers) {
      SCOPED_TRACE(fmt::format("{} in {}", io::statistics_kind_name(mapping->kind),
                               io::file_format_name(format)));
      const Codec& codec = io::detail::codec_for(format);
      const std::string bytes = codec.write(payload);
      EXPECT_TRUE(codec.has_signature(bytes) || codec.starts_like(bytes));
      EXPECT_EQ(codec.kind_of(bytes, "file"), mapping->kind);
      EXPECT_TRUE(same(codec.read(bytes, "file", mapping->kind, {}), payload));
    }
  }
}

TEST(FormatRegistry, NamesEveryFormatOnceAndPicksWrittenOnesByExtension) {
  std::set<std::string_view> names;
  std::set<std::string_view> extensions;
  for (const io::FileFormatInfo& info : io::file_formats()) {
    SCOPED_TRACE(info.name);
    EXPECT_TRUE(names.insert(info.name).second);
    EXPECT_EQ(io::file_format_name(info.format), info.name);
    EXPECT_EQ(&io::file_format_info(info.format), &info);
    EXPECT_FALSE(info.description.empty());
    ASSERT_FALSE(info.extensions.empty());
    for (const std::string_view extension : info.extensions) {
      EXPECT_TRUE(extensions.insert(extension).second) << extension;
      const std::string path = "file" + std::string(extension);
      if (info.writes_statistics) {
        EXPECT_EQ(io::format_of_extension(path), info.format);
        EXPECT_NE(io::written_extensions_text().find(extension), std::string::npos);
      } else {
        expect_error([&] { io::format_of_extension(path); }, {"unknown extension"});
      }
    }
  }
  EXPECT_EQ(names.size(), 5u);
  EXPECT_EQ(io::written_extensions_text(), ".json, .pt, .pth or .safetensors");
}

TEST(Codecs, TheTraceCodecRefusesEveryPayload) {
  const Codec& trace = io::detail::codec_for(io::FileFormat::kTrace);
  for (const PayloadMapping* mapping : io::detail::payload_mappings()) {
    expect_error([&] { trace.write(sample(mapping->kind)); }, {"trace"});
    expect_error([&] { trace.read("", "t.trace", mapping->kind, {}); }, {"per-token trace"});
  }
}

// ---- a payload no codec was written for ----

constexpr std::array<io::detail::Level, 2> kToyLevels{{{"rows", "row"}, {"columns", "column"}}};
constexpr std::array<io::detail::TensorForm, 1> kToyForms{
    {{"toy_loads", kToyLevels, 0, io::detail::Element::kCount}}};

io::NamedTensors toy_tensors() {
  io::NamedTensors out;
  const std::array<std::int64_t, 6> loads{5, 0, 7, 1, 2, 3};
  out.tensors.emplace_back("toy_loads", io::HostTensor::of<std::int64_t>({2, 3}, std::span(loads)));
  return out;
}

TEST(Codecs, EveryContainerHoldsAPayloadKnownOnlyToItsMapping) {
  // A mapping as a new payload would add: the containers lay its tensors out with no change.
  const PayloadMapping toy{io::StatisticsKind::kLogicalCounts, kToyForms, nullptr, nullptr};
  const io::NamedTensors tensors = toy_tensors();
  const io::HostTensor& written = tensors.tensors.front().second;
  for (const io::FileFormat format : kContainers) {
    SCOPED_TRACE(io::file_format_name(format));
    const auto& codec =
        dynamic_cast<const io::detail::TensorContainerCodec&>(io::detail::codec_for(format));
    const io::NamedTensors back = codec.decode(codec.encode(tensors), "file", toy, {});
    const auto [name, tensor] = io::detail::payload_tensor(toy, back);
    ASSERT_NE(tensor, nullptr);
    EXPECT_EQ(name, "toy_loads");
    EXPECT_EQ(tensor->shape, written.shape);
    EXPECT_EQ(tensor->to_int64(), written.to_int64());
  }
}

}  // namespace
}  // namespace moestat::test
