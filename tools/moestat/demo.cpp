// `moestat demo --out DIR`: records a built-in workload (a preset fitted to real traffic)
// through the CPU or CUDA recorder exactly as an engine would, checks the snapshot against
// an independent tally of the generated ids, dumps it as SGLang would, plans placements and
// hot-expert masks on the first half of the run and judges them on the second, and writes
// an HTML report of the run.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <moestat/error.hpp>
#include <moestat/io/document.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/sglang.hpp>
#include <moestat/io/snapshot_json.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/report.hpp>
#include <moestat/workload.hpp>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "command.hpp"
#include "demo_device.hpp"
#include "demo_plan.hpp"
#include "output_files.hpp"
#include "progress.hpp"

namespace moestat::cli {
namespace {

/// What the generator produced, counted with plain loops straight from its output (never
/// through the recorder or the placement lookup): the reference the snapshot must equal.
struct Tally {
  std::int64_t num_layers, num_logical, num_physical;
  std::vector<std::int64_t> logical;   ///< [W, L, E] from the generator's logical draws
  std::vector<std::int64_t> physical;  ///< [W, L, P]
  std::vector<std::int64_t> pass_tokens;
  std::int64_t routed = 0;        ///< ids in [0, P) of real tokens
  std::int64_t minus_ones = 0;    ///< -1 entries of real tokens
  std::int64_t dropped = 0;       ///< other out-of-range ids of real tokens
  std::int64_t padding_rows = 0;  ///< rows past the valid-token count (never counted)

  Tally(const ModelTopology& topology, std::int64_t num_passes)
      : num_layers(topology.num_layers),
        num_logical(topology.num_logical_experts),
        num_physical(topology.num_physical_experts),
        logical(std::size_t(num_passes * num_layers * num_logical), 0),
        physical(std::size_t(num_passes * num_layers * num_physical), 0) {}

  void add(std::int64_t pass, std::int64_t layer, std::int64_t valid_tokens, std::int64_t top_k,
           const std::vector<std::int32_t>& physical_ids,
           const std::vector<std::int32_t>& logical_ids) {
    std::int64_t* logical_row = logical.data() + (pass * num_layers + layer) * num_logical;
    std::int64_t* physical_row = physical.data() + (pass * num_layers + layer) * num_physical;
    for (std::int64_t i = 0; i < valid_tokens * top_k; ++i) {
      const std::int32_t id = physical_ids[std::size_t(i)];
      if (id == -1) {
        ++minus_ones;
      } else if (id < 0 || id >= num_physical) {
        ++dropped;
      } else {
        ++routed;
        ++physical_row[id];
        ++logical_row[logical_ids[std::size_t(i)]];
      }
    }
  }
};

/// Throws with the first difference between the snapshot and the tally.
void check_against_tally(const Snapshot& snapshot, const Tally& tally,
                         const workload::SyntheticWorkload& work) {
  const std::int64_t num_passes = work.options().num_passes;
  MOESTAT_CHECK(snapshot.num_passes == num_passes && snapshot.window_size() == num_passes,
                "check failed: snapshot holds {} passes ({} recorded), the demo ran {}",
                snapshot.window_size(), snapshot.num_passes, num_passes);
  for (std::int64_t pass = 0; pass < num_passes; ++pass) {
    const workload::PassBatch batch = work.batch(pass);
    MOESTAT_CHECK(snapshot.pass_ids[std::size_t(pass)] == batch.pass_id &&
                      snapshot.pass_num_tokens[std::size_t(pass)] == batch.num_valid_tokens &&
                      snapshot.placement_versions[std::size_t(pass)] == work.placement().version(),
                  "check failed: pass {}: snapshot has id {}, {} tokens, placement version {}; "
                  "expected id {}, {} tokens, version {}",
                  pass, snapshot.pass_ids[std::size_t(pass)],
                  snapshot.pass_num_tokens[std::size_t(pass)],
                  snapshot.placement_versions[std::size_t(pass)], batch.pass_id,
                  batch.num_valid_tokens, work.placement().version());
  }
  MOESTAT_CHECK(snapshot.dropped_ids == tally.dropped,
                "check failed: snapshot reports {} dropped ids, the generator produced {}",
                snapshot.dropped_ids, tally.dropped);
  const auto compare = [&](const std::vector<std::int64_t>& got,
                           const std::vector<std::int64_t>& expected, std::int64_t width,
                           const char* what) {
    MOESTAT_CHECK(got.size() == expected.size(), "check failed: {} counts have {} entries, not {}",
                  what, got.size(), expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i] == expected[i]) continue;
      const auto flat = std::int64_t(i);
      MOESTAT_FAIL(
          "check failed: pass {} layer {} {} expert {}: snapshot counts {}, the "
          "generator produced {}",
          flat / (width * tally.num_layers), flat / width % tally.num_layers, what, flat % width,
          got[i], expected[i]);
    }
  };
  compare(snapshot.logical_counts, tally.logical, tally.num_logical, "logical");
  compare(snapshot.physical_counts, tally.physical, tally.num_physical, "physical");
}

/// Throws naming the first field where the file read back differs from what was written.
void check_read_back(const Snapshot& written, const Snapshot& read) {
  const auto same = [](const char* field, const auto& a, const auto& b) {
    MOESTAT_CHECK(a == b, "check failed: snapshot.json read back differs in {}", field);
  };
  same("mode", written.mode, read.mode);
  same("dimensions",
       std::vector{written.num_layers, written.num_logical_experts, written.num_physical_experts,
                   written.top_k},
       std::vector{read.num_layers, read.num_logical_experts, read.num_physical_experts,
                   read.top_k});
  same("tallies", written.tallies(), read.tallies());
  same("pass rows (ids, placement versions, tokens)", written.pass_rows(), read.pass_rows());
  same("logical_count", written.logical_counts, read.logical_counts);
  same("physical_count", written.physical_counts, read.physical_counts);
}

/// Throws unless the report judges the placements as the demo printed them (identity first,
/// then recorded, EPLB, moestat): one computation behind both.
void check_report_figures(const std::vector<report::PlacementBalancedness>& report,
                          const HeldOutResults& held) {
  const std::vector<double> printed{held.recorded_balancedness, held.deepseek_balancedness,
                                    held.moestat_balancedness};
  for (std::size_t i = 0; i < printed.size(); ++i) {
    MOESTAT_CHECK(report.at(i + 1).balancedness == printed[i],
                  "check failed: the report gives {} balancedness {}, the demo printed {}",
                  report.at(i + 1).name, report.at(i + 1).balancedness, printed[i]);
  }
}

std::string size_text(std::size_t bytes) {
  return bytes >= 1 << 20 ? fmt::format("{:.1f} MiB", double(bytes) / double(1 << 20))
                          : fmt::format("{:.1f} KiB", double(bytes) / 1024.0);
}

/// Every file the demo writes into its directory.
constexpr std::array<const char*, 9> kDemoFiles{
    "snapshot.json",          "logical_count.pt",      "logical_count.json",
    "placement.json",         "placement_deepseek.pt", "placement_moestat.pt",
    "placement_moestat.json", "gpu_experts_masks.pt",  "report.html"};

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const workload::Preset& preset : workload::presets()) names.emplace_back(preset.name);
  return names;
}

class DemoCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand(
        "demo",
        "Record a built-in workload fitted to real traffic, check it against an independent "
        "tally, plan placements on its first half and judge them on the second, and write "
        "the files and an HTML report");
    sub->add_option("--out", out_dir_,
                    "Directory for the snapshot, SGLang-style dumps, placements, the GPU expert "
                    "mask and report.html (created if missing)")
        ->required();
    sub->add_option("--device", device_,
                    "Recorder: cpu, or cuda (ids copied to the GPU layer by layer, as a router "
                    "leaves them; needs a build with nvcc and a GPU)")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
    sub->add_option("--preset", preset_,
                    "Workload: " + fmt::format("{}", fmt::join(preset_names(), ", ")))
        ->check(CLI::IsMember(preset_names()))
        ->capture_default_str();
    // NOTE: CLI11 2.1 would wrap "-1" into 2^64 - 1 for an unsigned option; refuse it.
    sub->add_option("--seed", seed_, "Workload seed; the same seed writes the same files")
        ->check(kNonNegative)
        ->capture_default_str();
    // The window holds every pass ([passes, L, P] counts), so the count is capped at
    // SGLang's default window of 1000 passes.
    sub->add_option("--passes", num_passes_, "Forward passes to record")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1000}))
        ->capture_default_str();
    sub->footer(
        "Presets (docs/workload.md): deepseek-v3 (61 layers, 3 dense, 256 experts on 288\n"
        "slots over 32 GPUs, top-8 within 4 of 8 groups), mixtral-8x7b (32 layers, 8 experts\n"
        "on 12 slots over 4 GPUs, top-2), qwen3-moe (48 layers, 128 experts on 144 slots over\n"
        "16 GPUs, top-8). Expert popularity follows a law fitted to real counts: skewed per\n"
        "layer, different for prefill and decode passes, drifting over the run as much as two\n"
        "benchmark workloads differ. Decode (1-64 tokens) and prefill (512-4096 tokens) passes\n"
        "are padded to graph batch sizes; a few ids are -1 or out of range.\n\n"
        "The first half of the passes is planned on (DeepSeek's EPLB on their sum; moestat's\n"
        "planner with groups of them as scenarios), the second half judges the plans.\n\n"
        "Example:\n"
        "  moestat demo --out demo-out --preset mixtral-8x7b --seed 7 --passes 32\n"
        "  moestat inspect demo-out/logical_count.pt");
    return sub;
  }

  int run() override {
    // A directory the demo made is removed again if the demo fails; every file it will
    // write is checked before the first is written.
    OutputDirectory out(out_dir_, {kDemoFiles.begin(), kDemoFiles.end()});
    const std::filesystem::path& dir = out.path();
    std::vector<std::filesystem::path> outputs;
    for (const char* name : kDemoFiles) outputs.push_back(dir / name);
    check_outputs(outputs);

    const workload::Preset& preset = workload::preset(preset_);
    // One drift period per run: its end differs from its start as two benchmark workloads of
    // one phase do, so a placement planned on the start meets realistic change later.
    const workload::SyntheticWorkload work(
        preset, {.seed = seed_, .num_passes = num_passes_, .drift_passes = num_passes_});
    const ModelTopology& topology = work.topology();
    fmt::print(
        "workload: {}, {} layers ({} MoE), {} experts on {} slots over {} GPUs, top-{}, seed {}\n",
        preset.name, topology.num_layers, topology.num_moe_layers(), topology.num_logical_experts,
        topology.num_physical_experts, topology.ep_size, topology.top_k, seed_);

    DemoRecorder demo_recorder(device_, topology,
                               {.mode = RecordMode::kStat, .window_size = num_passes_});
    Recorder& recorder = demo_recorder.recorder();
    recorder.set_placement(work.placement());
    recorder.start();

    Tally tally(topology, num_passes_);
    std::vector<std::int32_t> physical_ids, logical_ids;
    std::int64_t decode_passes = 0, prefill_passes = 0, valid_tokens = 0;
    std::int64_t decode_calls = 0, prefill_calls = 0;
    double decode_seconds = 0.0, prefill_seconds = 0.0;
    ProgressBar progress(num_passes_, "pass");
    for (std::int64_t pass = 0; pass < num_passes_; ++pass) {
      progress.update(pass);
      const workload::PassBatch batch = work.batch(pass);
      (batch.prefill ? prefill_passes : decode_passes) += 1;
      valid_tokens += batch.num_valid_tokens;
      tally.padding_rows += batch.num_rows - batch.num_valid_tokens;
      physical_ids.resize(std::size_t(batch.num_rows * topology.top_k));
      logical_ids.resize(physical_ids.size());
      recorder.begin_pass(batch.pass_id);
      for (std::int64_t layer = 0; layer < topology.num_layers; ++layer) {
        if (!topology.is_moe(layer)) continue;
        work.fill_topk(pass, layer, physical_ids, logical_ids);
        tally.add(pass, layer, batch.num_valid_tokens, topology.top_k, physical_ids, logical_ids);
        const double took = demo_recorder.record(layer, physical_ids, batch.num_rows,
                                                 topology.top_k, batch.num_valid_tokens);
        (batch.prefill ? prefill_seconds : decode_seconds) += took;
        (batch.prefill ? prefill_calls : decode_calls) += 1;
      }
      recorder.end_pass();
    }
    progress.finish();
    demo_recorder.finish();
    recorder.stop();
    const Snapshot snapshot = recorder.snapshot();

    fmt::print("passes: {} ({} decode of {}-{} tokens, {} prefill of {}-{} tokens)\n", num_passes_,
               decode_passes, work.options().min_decode_tokens, work.options().max_decode_tokens,
               prefill_passes, work.options().min_prefill_tokens,
               work.options().max_prefill_tokens);
    fmt::print("tokens: {} valid, {} padding rows (garbage ids, not counted)\n", valid_tokens,
               tally.padding_rows);
    fmt::print("ids: {} routed, {} padding (-1), {} dropped (out of range)\n", tally.routed,
               tally.minus_ones, tally.dropped);
    const auto per_call = [](double seconds, std::int64_t calls) {
      return calls == 0 ? std::string("-")
                        : fmt::format("{:.2f} us", 1e6 * seconds / double(calls));
    };
    fmt::print("record_topk on {}: {} per decode layer, {} per prefill layer ({} + {} calls{})\n",
               demo_recorder.description(), per_call(decode_seconds, decode_calls),
               per_call(prefill_seconds, prefill_calls), decode_calls, prefill_calls,
               device_ == "cuda" ? "; host time to enqueue" : "");

    const std::string snapshot_json = io::snapshot_to_json(snapshot);
    io::write_file_atomically(dir / "snapshot.json", snapshot_json);
    // What SGLang's recorder dumps in stat mode (as .pt, and as its JSON statistics files),
    // and its --init-expert-location placement.
    const CountWindow counts = count_window_of(snapshot);
    io::write_counts(dir / "logical_count.pt", counts);
    io::write_counts(dir / "logical_count.json", counts);
    io::write_placement(dir / "placement.json", work.placement());

    check_against_tally(snapshot, tally, work);
    fmt::print("check: snapshot equals independent tally ({} assignments)\n", tally.routed);
    const io::Document read = io::read_document(dir / "snapshot.json");
    MOESTAT_CHECK(std::holds_alternative<Snapshot>(read),
                  "check failed: {} does not read back as a snapshot",
                  (dir / "snapshot.json").string());
    check_read_back(snapshot, std::get<Snapshot>(read));
    // SGLang's stat dump keeps the counts and their shape, not the passes' metadata.
    const CountWindow read_back = io::read_counts(dir / "logical_count.pt");
    MOESTAT_CHECK(read_back.counts == counts.counts &&
                      read_back.window_size == counts.window_size &&
                      read_back.num_layers == counts.num_layers &&
                      read_back.num_experts == counts.num_experts && read_back.has_window_axis,
                  "check failed: {} does not read back equal", (dir / "logical_count.pt").string());
    fmt::print("check: snapshot.json and logical_count.pt read back equal\n");

    // Planning needs passes to plan on and later passes to judge the plans on.
    report::Options report_options{.num_gpus = topology.ep_size,
                                   .num_nodes = preset.nodes,
                                   .placements = {{"recorded", work.placement()}}};
    const bool planned = snapshot.window_size() >= 2;
    std::optional<HeldOutResults> held;
    if (planned) {
      held.emplace(plan_and_evaluate(snapshot, preset, work.placement()));
      io::write_placement(dir / "placement_deepseek.pt", held->deepseek);
      io::write_placement(dir / "placement_moestat.pt", held->moestat);
      io::write_placement(dir / "placement_moestat.json", held->moestat);
      io::write_expert_mask(dir / "gpu_experts_masks.pt", held->layer_balanced_mask);
      print_held_out(*held);
      report_options.placements.push_back({"EPLB", held->deepseek});
      report_options.placements.push_back({"moestat", held->moestat});
      report_options.held_out_from = held->plan_passes;
    } else {
      fmt::print("plans: skipped (they need at least 2 passes: one to plan on, one to judge)\n");
    }

    // The report of the run: the recorded placement, EPLB's and moestat's plans on the
    // held-out passes; its figures are the ones printed above.
    const report::Recording recording = report::load_recording(dir / "snapshot.json");
    if (held) check_report_figures(report::balancedness(recording, report_options), *held);
    const std::string html = report::render_html(recording, report_options);
    io::write_file_atomically(dir / "report.html", html);

    fmt::print(
        "wrote: {}/ snapshot.json ({}), logical_count.pt and .json (SGLang stat dump), "
        "placement.json (recorded){}, report.html ({})\n",
        dir.string(), size_text(snapshot_json.size()),
        planned ? ", placement_deepseek.pt, placement_moestat.pt and .json "
                  "(--init-expert-location), gpu_experts_masks.pt (layer-balanced)"
                : "",
        size_text(html.size()));
    out.keep();
    return kExitOk;
  }

 private:
  static void print_held_out(const HeldOutResults& held) {
    // Labels padded to one column, so the figures line up.
    const auto line = [](const std::string& label, const std::string& value) {
      fmt::print("  {:<30}{}\n", label + ":", value);
    };
    fmt::print("plans: made on passes 0-{}, judged on passes {}-{} (held out); {} GPUs, {}\n",
               held.plan_passes - 1, held.plan_passes, held.plan_passes + held.eval_passes - 1,
               held.num_gpus, held.hierarchical ? "hierarchical" : "global");
    fmt::print(
        "balancedness on the held-out passes (mean over MoE layers of mean / max GPU "
        "load):\n");
    line("recorded", fmt::format("{:.3f}", held.recorded_balancedness));
    line("EPLB (DeepSeek, window sum)", fmt::format("{:.3f}", held.deepseek_balancedness));
    line(fmt::format("moestat ({} scenario{})", held.num_scenarios,
                     held.num_scenarios == 1 ? "" : "s"),
         fmt::format("{:.3f}", held.moestat_balancedness));
    fmt::print(
        "hot experts on the GPU ({}, a quarter of the MoE layers' experts, chosen on the "
        "planning passes), held-out assignments served:\n",
        held.hot_mask_budget);
    line("frequency (one global top-G)", fmt::format("{:.1f}%", 100.0 * held.frequency_hit_rate));
    line("layer-balanced", fmt::format("{:.1f}%", 100.0 * held.layer_balanced_hit_rate));
    if (fmt::format("{:.1f}", 100.0 * held.frequency_hit_rate) ==
        fmt::format("{:.1f}", 100.0 * held.layer_balanced_hit_rate)) {
      fmt::print("  ({})\n", why_hit_rates_tie(held));
    }
  }

  /// Two strategies with one figure look like a bug or a copy; say which it is.
  static std::string why_hit_rates_tie(const HeldOutResults& held) {
    const plan::HotExpertOptions bounds;
    if (held.hot_mask_differences == 0) {
      return fmt::format(
          "the same mask: frequency already gives every MoE layer {} to {} experts, inside "
          "layer-balanced's bounds of {}x to {}x the even share of {:.1f}",
          held.frequency_fewest, held.frequency_most, bounds.min_share, bounds.max_share,
          held.even_share);
    }
    return fmt::format(
        "the masks differ in {} of {} experts, which serve nearly equal shares of the held-out "
        "assignments: {:.3f}% and {:.3f}%",
        held.hot_mask_differences, held.hot_mask_budget, 100.0 * held.frequency_hit_rate,
        100.0 * held.layer_balanced_hit_rate);
  }

  std::string out_dir_;
  std::string device_ = "cpu";
  std::string preset_ = "deepseek-v3";
  std::uint64_t seed_ = 1;
  std::int64_t num_passes_ = 64;
};

}  // namespace

std::unique_ptr<Command> make_demo_command() { return std::make_unique<DemoCommand>(); }

}  // namespace moestat::cli
