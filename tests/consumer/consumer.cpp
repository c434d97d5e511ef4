// A program of an engine that uses the installed moestat: it records one pass of top-k ids
// on the CPU, writes SGLang's stat dump and checks that the counts read back are the ids'.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <moestat/counts.hpp>
#include <moestat/io/sglang.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/placement.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/tensor_view.hpp>
#include <moestat/topology.hpp>
#include <vector>

namespace {

constexpr std::int64_t kLayers = 2;
constexpr std::int64_t kExperts = 4;
constexpr std::int64_t kTopK = 2;

int run(const std::filesystem::path& directory) {
  const moestat::ModelTopology topology = moestat::ModelTopology::uniform(kLayers, kExperts, kTopK);
  moestat::record::CpuRecorder recorder(topology, {.mode = moestat::RecordMode::kStat});
  // Each layer's [3 tokens, top-2] ids, and the counts they should give.
  const std::vector<std::vector<std::int32_t>> ids = {{0, 1, 1, 2, 3, 1}, {2, 3, 0, 3, 3, 1}};
  std::vector<std::int64_t> expected(std::size_t(kLayers * kExperts), 0);

  recorder.start();
  recorder.begin_pass(0);
  for (std::int64_t layer = 0; layer < kLayers; ++layer) {
    const std::vector<std::int32_t>& layer_ids = ids[std::size_t(layer)];
    const auto tokens = std::int64_t(layer_ids.size()) / kTopK;
    recorder.record_topk(layer, moestat::TensorView::contiguous(
                                    layer_ids.data(), moestat::DType::kInt32, {tokens, kTopK}));
    for (const std::int32_t id : layer_ids) ++expected[std::size_t(layer * kExperts + id)];
  }
  recorder.end_pass();

  const auto placement = moestat::Placement::trivial(kLayers, kExperts, kExperts);
  const std::filesystem::path dump =
      moestat::io::write_sglang_dump(recorder.snapshot(), placement, 0, directory);
  const moestat::CountWindow counts = moestat::io::read_counts(dump);
  if (counts.totals() != expected) {
    std::fprintf(stderr, "consumer: %s does not hold the recorded counts\n", dump.c_str());
    return 1;
  }
  std::printf("consumer: %s holds the recorded counts\n", dump.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIRECTORY\n", argv[0]);
    return 2;
  }
  try {
    return run(argv[1]);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "consumer: %s\n", error.what());
    return 1;
  }
}
