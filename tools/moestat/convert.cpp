// `moestat convert IN OUT`: statistics, placements and masks between .json, .pt and
// .safetensors, the input's format read from its contents and the output's from OUT's name.
#include <fmt/format.h>

#include <filesystem>
#include <moestat/io/formats.hpp>
#include <moestat/io/statistics.hpp>
#include <string>
#include <vector>

#include "command.hpp"
#include "output_files.hpp"

namespace moestat::cli {
namespace {

class ConvertCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* sub = app.add_subcommand(
        "convert",
        "Convert logical counts, a placement or an expert mask between .json, .pt and "
        ".safetensors");
    sub->add_option("IN", in_, "The file to read (format detected from its contents)")->required();
    sub->add_option(
           "OUT", out_,
           "The file to write, in the format of its extension: " + io::written_extensions_text())
        ->required();
    sub->footer(
        "IN may be a moestat snapshot (its window's logical counts are converted), an SGLang\n"
        "logical_count file or recorder dump (stat, per-pass or per-token), a placement\n"
        "(physical_to_logical_map) or a GPU expert mask (gpu_experts_masks). OUT is written\n"
        "atomically: .pt as SGLang writes it (torch.load(path, weights_only=True) reads it).\n"
        "\n"
        "Example:\n"
        "  moestat demo --out demo-out\n"
        "  moestat convert demo-out/placement.json placement.pt\n"
        "  moestat convert expert_distribution_recorder_1730000000.0.pt counts.json");
    return sub;
  }

  int run() override {
    io::format_of_extension(out_);  // an OUT that cannot be written fails before IN is read
    const std::filesystem::path out_path(out_);
    OutputFiles output({&out_path, 1}, std::vector<std::string>{in_});
    const io::StatisticsFile file = io::read_statistics_file(in_);
    io::write_statistics_file(out_, file);
    output.keep();
    fmt::print("wrote {} ({}) from {}\n", out_, io::statistics_kind_name(io::statistics_kind(file)),
               in_);
    return kExitOk;
  }

 private:
  std::string in_;
  std::string out_;
};

}  // namespace

std::unique_ptr<Command> make_convert_command() { return std::make_unique<ConvertCommand>(); }

}  // namespace moestat::cli
