// `moestat merge OUT IN...`: one cluster-wide file of logical counts from every rank's dump
// (the offline counterpart of the engines' cross-rank sum): counts of the same pass add up.
#include <fmt/format.h>

#include <filesystem>
#include <moestat/checked_math.hpp>
#include <moestat/error.hpp>
#include <moestat/io/formats.hpp>
#include <moestat/io/statistics.hpp>
#include <string>
#include <vector>

#include "command.hpp"
#include "output_files.hpp"

namespace moestat::cli {
namespace {

class MergeCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand(
        "merge", "Sum the logical counts of several recordings (one per rank) into one file");
    sub->add_option("OUT", out_, "The file to write (format from its extension)")->required();
    sub->add_option("IN", ins_, "The files to add up (formats detected from their contents)")
        ->required()
        ->expected(1, -1);
    sub->add_flag("--totals", totals_,
                  "Write the sum over every pass, [layers, experts], so that recordings "
                  "with different numbers of passes can be merged");
    sub->add_flag("--force", force_, "Replace OUT if it exists (never when it is also an IN)");
    sub->footer(
        "Every IN must describe the same model (layers x experts). Without --totals they must\n"
        "also hold the same passes (each rank's per-pass or stat dump of one run), and pass i\n"
        "of OUT is the sum of pass i of every IN. OUT is written atomically: .pt as an SGLang\n"
        "stat dump, .json {\"logical_count\"}, .safetensors. Under tensor parallelism sum one\n"
        "rank per group of ranks that saw the same tokens (docs/distributed.md). An OUT that\n"
        "exists is refused without --force (a forgotten OUT would make the first IN the\n"
        "output), and an OUT that is also an IN always.\n"
        "\n"
        "Example:\n"
        "  moestat merge cluster.pt expert_distribution_recorder_1730000000.0_*.pt\n"
        "  moestat merge --totals all.json monday.pt tuesday.pt");
    return sub;
  }

  int run() override {
    io::format_of_extension(out_);  // a wrong OUT name fails before anything is read
    refuse_overwriting(out_, ins_, force_);
    const std::filesystem::path out(out_);
    OutputFiles output({&out, 1}, ins_);
    CountWindow merged;
    std::int64_t assignments = 0;
    for (std::size_t i = 0; i < ins_.size(); ++i) {
      CountWindow part = io::read_counts(ins_[i]);
      if (totals_) part = totals_of(part, ins_[i]);
      if (i == 0) {
        merged = std::move(part);
      } else {
        add(merged, part, ins_[i]);
      }
    }
    // Every sum was checked as it was made; this one only says which files it was.
    assignments =
        checked_sum(merged.counts, fmt::format("the sum of the counts of {} files", ins_.size()));
    io::write_counts(out_, merged);
    output.keep();
    const std::string passes =
        merged.has_window_axis ? fmt::format("{} passes of ", merged.window_size) : "totals of ";
    fmt::print("wrote {}: {} files, {}{} layers x {} experts, {} assignments\n", out_, ins_.size(),
               passes, merged.num_layers, merged.num_experts, assignments);
    return kExitOk;
  }

 private:
  /// The sum over every pass of `counts`, read from `path` (which its errors name).
  static CountWindow totals_of(const CountWindow& counts, const std::string& path) {
    try {
      return {.window_size = 1,
              .num_layers = counts.num_layers,
              .num_experts = counts.num_experts,
              .has_window_axis = false,
              .counts = counts.totals()};
    } catch (const Error& error) {
      throw error.with_context(path);
    }
  }

  /// Adds `part` (read from `path`) to `sum`, after checking they describe the same passes.
  void add(CountWindow& sum, const CountWindow& part, const std::string& path) const {
    MOESTAT_CHECK(part.num_layers == sum.num_layers && part.num_experts == sum.num_experts,
                  "{}: {} layers x {} experts, but {} has {} x {}", path, part.num_layers,
                  part.num_experts, ins_.front(), sum.num_layers, sum.num_experts);
    MOESTAT_CHECK(
        part.window_size == sum.window_size && part.has_window_axis == sum.has_window_axis,
        "{}: {} passes, but {} has {}; merge their totals with --totals", path,
        part.has_window_axis ? part.window_size : 0, ins_.front(),
        sum.has_window_axis ? sum.window_size : 0);
    for (std::size_t i = 0; i < sum.counts.size(); ++i) {
      MOESTAT_CHECK(!__builtin_add_overflow(sum.counts[i], part.counts[i], &sum.counts[i]),
                    "{}: logical_count{} plus the same count of the files before it overflows "
                    "int64",
                    path, index_text(sum, i));
    }
    // What each file says of its passes does not add up (one rank's tokens are not the
    // pass's), and no written format keeps it.
    sum.pass_rows = {};
  }

  /// "[pass][layer][expert]" (or "[layer][expert]") of entry `flat` of `counts`.
  static std::string index_text(const CountWindow& counts, std::size_t flat) {
    const auto i = std::int64_t(flat);
    const std::int64_t expert = i % counts.num_experts;
    const std::int64_t layer = i / counts.num_experts % counts.num_layers;
    const std::int64_t pass = i / (counts.num_experts * counts.num_layers);
    return counts.has_window_axis ? fmt::format("[{}][{}][{}]", pass, layer, expert)
                                  : fmt::format("[{}][{}]", layer, expert);
  }

  std::string out_;
  std::vector<std::string> ins_;
  bool totals_ = false;
  bool force_ = false;
};

}  // namespace

std::unique_ptr<Command> make_merge_command() { return std::make_unique<MergeCommand>(); }

}  // namespace moestat::cli
