// Recorder::passes_since on the CUDA recorder: reads of the new passes, made while passes are
// recorded on a stream, equal the CPU recorder's fed the same ids (the reference;
// tests/unit/passes_since_test.cpp checks it against snapshot()) and the rows of the CUDA
// recorder's own snapshot, across the ring's wrap-around, passes that left the window, and a
// restart.
#include "gpu/paired_recorders.hpp"
#include "unit/expect_error.hpp"

namespace moestat::test {
namespace {

/// The reads of two recorders agree but for the generation, each recorder's own.
void expect_same_passes(const PassesSince& expected, const PassesSince& actual) {
  PassesSince same_generation = actual;
  same_generation.generation = expected.generation;
  EXPECT_EQ(same_generation, expected);
}

/// The last `rows` window rows of `snapshot` are those of `passes`.
void expect_snapshot_rows(const Snapshot& snapshot, const PassesSince& passes) {
  const std::int64_t first = snapshot.window_size() - passes.size();
  ASSERT_GE(first, 0);
  const std::int64_t cells = snapshot.num_layers * snapshot.num_physical_experts;
  EXPECT_EQ(std::vector<std::int64_t>(snapshot.pass_ids.begin() + first, snapshot.pass_ids.end()),
            passes.pass_ids);
  EXPECT_EQ(std::vector<std::int64_t>(snapshot.physical_counts.begin() + first * cells,
                                      snapshot.physical_counts.end()),
            passes.physical_counts);
  EXPECT_EQ(snapshot.num_passes, passes.num_passes);
}

TEST(CudaPassesSince, ReadsTheNewPassesAsTheCpuRecorderDoes) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  for (RecordMode mode : {RecordMode::kStat, RecordMode::kPerPass}) {
    SCOPED_TRACE(std::string(record_mode_name(mode)));
    PairedRecorders recorders(topology, {.mode = mode, .window_size = 16});
    record::CpuRecorder& cpu = recorders.cpu();
    record::CudaRecorder& gpu = recorders.gpu();
    recorders.start();
    PassesSince cpu_passes, gpu_passes;
    const auto read_both = [&] {
      cpu_passes = cpu.passes_since(cpu_passes.generation, cpu_passes.next_arrival());
      gpu_passes = gpu.passes_since(gpu_passes.generation, gpu_passes.next_arrival());
      expect_same_passes(cpu_passes, gpu_passes);
    };

    std::mt19937_64 rng(7);
    for (std::int64_t pass = 0; pass < 45; ++pass) {
      if (pass == 40) recorders.start();  // a restart: the next read starts the new generation
      recorders.record_pass(pass, 1 + (pass * 11) % 23, rng);
      // Reads after a few passes, after more than the window of 16 holds (stat: missed), after
      // none, after one, and after the restart.
      if (pass == 3 || pass == 30 || pass == 31 || pass == 44) {
        SCOPED_TRACE(pass);
        const std::uint64_t generation = gpu_passes.generation;
        read_both();
        expect_snapshot_rows(gpu.snapshot(), gpu_passes);
        if (pass == 30) {
          EXPECT_EQ(gpu_passes.missed_passes, mode == RecordMode::kStat ? 11 : 0);
          read_both();  // again before another pass: nothing new
          EXPECT_EQ(gpu_passes.size(), 0);
        }
        if (pass == 31) {
          EXPECT_EQ(gpu_passes.size(), 1);
        }
        if (pass == 44) {
          EXPECT_NE(gpu_passes.generation, generation);
          EXPECT_EQ(gpu_passes.first_arrival, 0);
          EXPECT_EQ(gpu_passes.size(), 5);
        }
      }
    }
    EXPECT_MOESTAT_ERROR(gpu.passes_since(gpu_passes.generation, gpu_passes.next_arrival() + 1),
                         "is outside the 5 passes that reached the window");
  }
}

}  // namespace
}  // namespace moestat::test
