// Recorder::gpu_loads_since on the CUDA recorder (stat: reduced on the device; per_pass: the
// collected passes reduced on the host) equals the CPU recorder's fed the same ids (the
// reference; tests/unit/gpu_loads_since_test.cpp checks it against a naive recomputation):
// between passes, for two GPU counts, across a placement change, passes that left the window
// and a restart; in reads made from another thread while passes run; and in reads of passes
// replayed from a captured CUDA graph, also while a replay runs.
#include <atomic>
#include <exception>
#include <map>
#include <moestat/gpu_loads.hpp>
#include <thread>

#include "gpu/paired_recorders.hpp"
#include "unit/expect_error.hpp"

namespace moestat::test {
namespace {

constexpr std::int64_t kGpus = 8;

/// The reads of two recorders agree but for the generation, each recorder's own.
void expect_same_loads(const GpuLoadsSince& expected, const GpuLoadsSince& actual) {
  GpuLoadsSince same_generation = actual;
  same_generation.generation = expected.generation;
  EXPECT_EQ(same_generation, expected);
}

/// The CPU recorder's read of each pass on its own, by arrival: follow() after every pass.
/// Both recorders started together and never restarted, so their arrivals are the same.
class PassReference {
 public:
  void follow(const Recorder& cpu) {
    last_ = cpu.gpu_loads_since(last_.generation, last_.next_arrival(), kGpus);
    ASSERT_EQ(last_.size(), 1);
    by_arrival_[last_.first_arrival] = last_;
  }

  /// `read` holds whole passes, each as the reference has it, and the logical totals of
  /// exactly those.
  void expect_consistent(const GpuLoadsSince& read) const {
    const std::int64_t cells = read.num_layers * read.num_gpus;
    std::vector<std::int64_t> logical(read.logical_totals.size(), 0);
    for (std::int64_t row = 0; row < read.size(); ++row) {
      SCOPED_TRACE(read.first_arrival + row);
      const auto row_index = std::size_t(row);
      const auto found = by_arrival_.find(read.first_arrival + row);
      ASSERT_NE(found, by_arrival_.end());
      const GpuLoadsSince& pass = found->second;
      EXPECT_EQ(read.pass_ids[row_index], pass.pass_ids[0]);
      EXPECT_EQ(std::vector<std::int64_t>(read.gpu_loads.begin() + row * cells,
                                          read.gpu_loads.begin() + (row + 1) * cells),
                pass.gpu_loads);
      EXPECT_EQ(read.balancedness[row_index], pass.balancedness[0]);  // bit for bit
      EXPECT_EQ(read.pass_num_tokens[row_index], pass.pass_num_tokens[0]);
      EXPECT_EQ(read.placement_versions[row_index], pass.placement_versions[0]);
      for (std::size_t cell = 0; cell < logical.size(); ++cell)
        logical[cell] += pass.logical_totals[cell];
    }
    EXPECT_EQ(read.logical_totals, logical);
  }

 private:
  GpuLoadsSince last_;
  std::map<std::int64_t, GpuLoadsSince> by_arrival_;
};

/// Every layer's slots shuffled (slot p holds expert (7p + layer) mod E), version `version`.
Placement shuffled_placement(const ModelTopology& topology, std::uint64_t version) {
  std::vector<std::int32_t> map;
  for (std::int64_t layer = 0; layer < topology.num_layers; ++layer) {
    for (std::int64_t slot = 0; slot < topology.num_physical_experts; ++slot) {
      map.push_back(std::int32_t((7 * slot + layer) % topology.num_logical_experts));
    }
  }
  return Placement(topology.num_layers, topology.num_physical_experts, topology.num_logical_experts,
                   std::move(map), version);
}

TEST(CudaGpuLoadsSince, EqualTheCpuRecordersBetweenPasses) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  for (RecordMode mode : {RecordMode::kStat, RecordMode::kPerPass}) {
    SCOPED_TRACE(std::string(record_mode_name(mode)));
    PairedRecorders recorders(topology, {.mode = mode, .window_size = 16});
    recorders.start();
    // One reader per GPU count on each recorder: 8 (36 slots per GPU) and 32 (9 per GPU).
    const std::vector<std::int64_t> gpu_counts = {kGpus, 32};
    std::vector<GpuLoadsSince> cpu_reads(gpu_counts.size()), gpu_reads(gpu_counts.size());
    std::mt19937_64 rng(5);
    for (std::int64_t pass = 0; pass < 45; ++pass) {
      if (pass == 20) {  // the reads after it span two placements
        recorders.cpu().set_placement(shuffled_placement(topology, 1));
        recorders.gpu().set_placement(shuffled_placement(topology, 1));
      }
      if (pass == 40) recorders.start();  // a restart: the next read starts the new generation
      recorders.record_pass(pass, 1 + (pass * 11) % 23, rng);
      // Reads after a few passes, after more than the window of 16 holds (stat: missed) and
      // across the placement change, after one pass and after the restart.
      for (const std::int64_t read_at : {3, 22, 26, 27, 44}) {
        if (pass != read_at) continue;
        SCOPED_TRACE(pass);
        for (std::size_t reader = 0; reader < gpu_counts.size(); ++reader) {
          GpuLoadsSince& cpu_read = cpu_reads[reader];
          GpuLoadsSince& gpu_read = gpu_reads[reader];
          cpu_read = recorders.cpu().gpu_loads_since(cpu_read.generation, cpu_read.next_arrival(),
                                                     gpu_counts[reader]);
          gpu_read = recorders.gpu().gpu_loads_since(gpu_read.generation, gpu_read.next_arrival(),
                                                     gpu_counts[reader]);
          expect_same_loads(cpu_read, gpu_read);
        }
        if (pass == 22) {  // arrivals 4-22 asked for; the window of 16 holds 7-22
          EXPECT_EQ(gpu_reads[0].missed_passes, mode == RecordMode::kStat ? 3 : 0);
          EXPECT_EQ(gpu_reads[0].placement_versions.front(), 0u);
          EXPECT_EQ(gpu_reads[0].placement_versions.back(), 1u);
        }
        if (pass == 27) {
          EXPECT_EQ(gpu_reads[0].size(), 1);
        }
        if (pass == 44) {
          EXPECT_EQ(gpu_reads[0].first_arrival, 0);
          EXPECT_EQ(gpu_reads[0].size(), 5);
        }
      }
    }
  }
}

TEST(CudaGpuLoadsSince, ReadsFromAnotherThreadWhilePassesRunHoldWholePasses) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  constexpr std::int64_t kPasses = 48, kMaxTokens = 31;
  for (RecordMode mode : {RecordMode::kStat, RecordMode::kPerPass}) {
    SCOPED_TRACE(std::string(record_mode_name(mode)));
    PairedRecorders recorders(topology, {.mode = mode, .window_size = 16});
    recorders.start();
    // Every pass's ids in a buffer of their own, so no pass waits for the one before.
    const std::size_t ids_per_pass = recorders.ids_per_pass(kMaxTokens);
    DeviceArray<std::int64_t> device_ids(std::size_t(kPasses) * ids_per_pass);

    std::atomic<bool> recorded{false};
    std::vector<GpuLoadsSince> reads;
    std::exception_ptr failure;
    std::thread reader([&] {
      try {
        GpuLoadsSince read;
        while (!recorded.load()) {
          read = recorders.gpu().gpu_loads_since(read.generation, read.next_arrival(), kGpus);
          reads.push_back(read);
        }
      } catch (...) {
        failure = std::current_exception();
      }
    });
    PassReference reference;
    std::mt19937_64 rng(9);
    for (std::int64_t pass = 0; pass < kPasses; ++pass) {
      recorders.enqueue_pass(pass, 1 + (pass * 7) % kMaxTokens, rng,
                             device_ids.data() + std::size_t(pass) * ids_per_pass);
      reference.follow(recorders.cpu());
    }
    MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(recorders.stream()));
    recorded.store(true);
    reader.join();
    ASSERT_FALSE(failure);
    const GpuLoadsSince last = reads.empty() ? GpuLoadsSince{} : reads.back();
    reads.push_back(recorders.gpu().gpu_loads_since(last.generation, last.next_arrival(), kGpus));

    std::int64_t next_arrival = 0, passes_read = 0, passes_missed = 0;
    for (const GpuLoadsSince& read : reads) {
      reference.expect_consistent(read);
      EXPECT_EQ(read.first_arrival, next_arrival + read.missed_passes);
      next_arrival = read.next_arrival();
      passes_read += read.size();
      passes_missed += read.missed_passes;
    }
    EXPECT_EQ(passes_read + passes_missed, kPasses);
    EXPECT_EQ(reads.back().num_passes, kPasses);
    if (mode == RecordMode::kPerPass) {
      EXPECT_EQ(passes_missed, 0);
    }
  }
}

TEST(CudaGpuLoadsSince, ReadsPassesReplayedFromACapturedGraph) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  constexpr std::int64_t kMaxTokens = 24, kTopK = PairedRecorders::kTopK;
  constexpr int kReplays = 40;
  for (RecordMode mode : {RecordMode::kStat, RecordMode::kPerPass}) {
    SCOPED_TRACE(std::string(record_mode_name(mode)));
    PairedRecorders recorders(topology, {.mode = mode, .window_size = 16});
    record::CpuRecorder& cpu = recorders.cpu();
    record::CudaRecorder& gpu = recorders.gpu();
    std::vector<std::int64_t> moe_layers;
    std::vector<std::unique_ptr<DeviceArray<std::int64_t>>> ids;
    for (std::int64_t layer = 0; layer < topology.num_layers; ++layer) {
      if (!topology.is_moe(layer)) continue;
      moe_layers.push_back(layer);
      ids.push_back(std::make_unique<DeviceArray<std::int64_t>>(std::size_t(kMaxTokens * kTopK)));
    }
    DeviceArray<std::int32_t> valid(1);

    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    MOESTAT_EXPECT_CUDA(
        cudaStreamBeginCapture(recorders.stream(), cudaStreamCaptureModeThreadLocal));
    gpu.begin_pass(0);
    for (std::size_t i = 0; i < moe_layers.size(); ++i) {
      gpu.record_topk(moe_layers[i],
                      TensorView::contiguous(ids[i]->data(), DType::kInt64, {kMaxTokens, kTopK},
                                             Device::cuda(0)),
                      TensorView::contiguous(valid.data(), DType::kInt32, {1}, Device::cuda(0)));
    }
    gpu.end_pass();
    MOESTAT_EXPECT_CUDA(cudaStreamEndCapture(recorders.stream(), &graph));
    MOESTAT_EXPECT_CUDA(cudaGraphInstantiate(&exec, graph, 0));

    recorders.start();
    PassReference reference;
    GpuLoadsSince cpu_read, gpu_read, running_read;
    std::mt19937_64 rng(13);
    for (int replay = 0; replay < kReplays; ++replay) {
      const auto num_valid = std::int32_t(rng() % (kMaxTokens + 1));  // 0 included
      valid.upload({num_valid});
      cpu.begin_pass(0);  // the pass id the graph captured
      for (std::size_t i = 0; i < moe_layers.size(); ++i) {
        const std::vector<std::int64_t> layer_ids =
            random_ids(rng, kMaxTokens, kTopK, topology.num_physical_experts);
        ids[i]->upload(layer_ids);
        cpu.record_topk(
            moe_layers[i],
            TensorView::contiguous(layer_ids.data(), DType::kInt64, {kMaxTokens, kTopK}),
            num_valid);
      }
      cpu.end_pass();
      reference.follow(cpu);
      MOESTAT_EXPECT_CUDA(cudaGraphLaunch(exec, recorders.stream()));
      // While the replay may still run: whole passes only, whichever they are.
      running_read =
          gpu.gpu_loads_since(running_read.generation, running_read.next_arrival(), kGpus);
      reference.expect_consistent(running_read);
      MOESTAT_EXPECT_CUDA(cudaStreamSynchronize(recorders.stream()));
      if (replay == 5 || replay == 30 || replay == 31 || replay == kReplays - 1) {
        SCOPED_TRACE(replay);
        cpu_read = cpu.gpu_loads_since(cpu_read.generation, cpu_read.next_arrival(), kGpus);
        gpu_read = gpu.gpu_loads_since(gpu_read.generation, gpu_read.next_arrival(), kGpus);
        expect_same_loads(cpu_read, gpu_read);
        reference.expect_consistent(gpu_read);
      }
    }
    EXPECT_EQ(gpu_read.num_passes, kReplays);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

TEST(CudaGpuLoadsSince, RefusesABadGpuCountOrAModeWithoutPasses) {
  MOESTAT_REQUIRE_GPU();
  const ModelTopology topology = deepseek_like_topology();
  record::CudaRecorder stat(topology, {.mode = RecordMode::kStat});
  EXPECT_MOESTAT_ERROR(stat.gpu_loads_since(0, 0, 7),
                       "gpu_loads_since: 7 GPUs cannot share 288 physical expert slots evenly");
  EXPECT_MOESTAT_ERROR(stat.gpu_loads_since(0, 0, 0), "at least 1, not 0");
  record::CudaRecorder decayed(topology, {.mode = RecordMode::kDecayed});
  EXPECT_MOESTAT_ERROR(decayed.gpu_loads_since(0, 0, kGpus),
                       "gpu_loads_since needs a recorder that keeps passes");
}

}  // namespace
}  // namespace moestat::test
