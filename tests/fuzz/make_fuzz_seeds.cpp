// Writes the seed corpora of the fuzz targets with moestat's own writers:
// `make_fuzz_seeds DIR` fills DIR/{pt,safetensors,json,simulation,trace,routes,gguf}/ with small
// valid files.
// (The torch.save fixtures of tests/io/fixtures are added to the pt corpus by the script.)
// The pt corpus also holds the bare pickles of its files, for the unpickler, and every corpus
// the reproductions of the hostile-input findings of issue 14.
#include <fmt/format.h>

#include <cstdio>
#include <moestat/io/files.hpp>
#include <moestat/io/safetensors.hpp>
#include <moestat/io/sglang.hpp>
#include <moestat/io/snapshot_json.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/io/trace_file.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/routes/cpu_route_recorder.hpp>
#include <moestat/routes/routes_file.hpp>

#include "io/gguf_writer.hpp"
#include "io/pickle.hpp"

namespace {

using namespace moestat;

Snapshot recorded(RecordMode mode) {
  ModelTopology topology = ModelTopology::uniform(3, 4, 2);
  topology.moe_layers[1] = false;
  topology.num_physical_experts = 6;
  record::CpuRecorder recorder(topology, {.mode = mode, .window_size = 2, .decay = 0.5});
  recorder.start();
  recorder.set_placement(
      Placement(3, 6, 4, {0, 1, 2, 3, 0, 0, 0, 1, 2, 3, 0, 1, 3, 2, 1, 0, 3, 3}, 1));
  for (std::int64_t pass = 0; pass < 3; ++pass) {
    const std::vector<std::int32_t> ids = {0, 5, 3, -1, std::int32_t(pass), 2};
    recorder.begin_pass(pass);
    recorder.record_topk(0, TensorView::contiguous(ids.data(), DType::kInt32, {3, 2}));
    recorder.record_topk(2, TensorView::contiguous(ids.data(), DType::kInt32, {3, 2}), 2);
    recorder.end_pass();
  }
  return recorder.snapshot();
}

/// The reproductions of hostile-input findings, scaled down (each finding is about the ratio
/// of what a reader spends to the file's size): the pickle arena, declared sizes, overflowing
/// counts, many keys, terminal escapes, ambiguous duplicates and damaged headers.
void write_hostile_seeds(const std::filesystem::path& dir) {
  // Pickles: a run of EMPTY_LIST and a run of MEMOIZE; a dict that sets one key twice.
  io::write_file_atomically(dir / "pt" / "empty_lists.pkl",
                            "\x80\x02" + std::string(100000, ']') + ".");
  io::write_file_atomically(dir / "pt" / "memoize.pkl",
                            "\x80\x04]" + std::string(100000, '\x94') + ".");
  io::write_file_atomically(
      dir / "pt" / "duplicate_key.pkl",
      // (Each string literal ends before a hex digit would extend its \x escape.)
      std::string("\x80\x02}(X\x01\x00\x00\x00"
                  "aK\x01X\x01\x00\x00\x00"
                  "aK\x02u.",
                  22));
  // JSON: ten million declared layers and an empty window; counts that overflow int64 when
  // summed; ten thousand keys; a key that would clear a terminal.
  std::string layers = io::snapshot_to_json(recorded(RecordMode::kStat));
  for (const std::string declared : {"\"num_layers\": 3", "\"num_layers\":3"}) {
    if (const auto at = layers.find(declared); at != std::string::npos) {
      layers.replace(at, declared.size(), "\"num_layers\":10000000");
    }
  }
  io::write_file_atomically(dir / "json" / "declared_layers.json", layers);
  io::write_file_atomically(
      dir / "json" / "overflow.json",
      R"({"logical_count": [[9223372036854775807, 9223372036854775807], [2, 3]]})");
  std::string keys = "{";
  for (int key = 0; key < 10000; ++key)
    keys += (key ? ",\"k" : "\"k") + std::to_string(key) + "\":1";
  io::write_file_atomically(dir / "json" / "many_keys.json", keys + "}");
  io::write_file_atomically(dir / "json" / "escape.json",
                            "{\"\x1b[2J\x1b]0;pwned\x07\": [[1, 2]]}");
  // Nesting and repeated keys, which the JSON scan bounds and refuses (issue 29).
  io::write_file_atomically(dir / "json" / "nested.json",
                            std::string(60, '[') + "1" + std::string(60, ']'));
  io::write_file_atomically(dir / "json" / "key_twice.json",
                            R"({"logical_count": [[1]], "logical_count": [[2]]})");
  // safetensors: a header length past the end of the file; an entry with two dtypes.
  io::write_file_atomically(dir / "safetensors" / "long_header.safetensors",
                            std::string("\xff\xff\xff\x00\x00\x00\x00\x00{}", 10));
  const std::string two_dtypes =
      R"({"t":{"dtype":"I64","dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
  io::write_file_atomically(dir / "safetensors" / "two_dtypes.safetensors",
                            std::string(1, char(two_dtypes.size())) + std::string(7, '\0') +
                                two_dtypes + std::string(4, '\1'));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds DIR\n");
    return 2;
  }
  try {
    const std::filesystem::path dir = argv[1];
    for (const char* sub : {"pt", "safetensors", "json", "simulation", "trace", "routes", "gguf"}) {
      std::filesystem::create_directories(dir / sub);
    }
    const Placement placement(3, 6, 4, {0, 1, 2, 3, 0, 0, 0, 1, 2, 3, 0, 1, 3, 2, 1, 0, 3, 3}, 1);
    const CountWindow counts = count_window_of(recorded(RecordMode::kStat));
    const ExpertMask mask{2, 3, {1, 0, 1, 0, 0, 1}};
    // .pt: every dump SGLang writes, a placement, a mask, a value of every kind.
    io::write_counts(dir / "pt" / "stat.pt", counts);
    io::write_pt_file(dir / "pt" / "per_pass.pt",
                      io::sglang_per_pass_dump(recorded(RecordMode::kPerPass), placement, 1));
    io::write_pt_file(dir / "pt" / "per_token.pt",
                      io::sglang_per_token_dump(recorded(RecordMode::kPerToken), placement, 1));
    io::write_placement(dir / "pt" / "placement.pt", placement);
    io::write_expert_mask(dir / "pt" / "mask.pt", mask);
    io::write_pt_file(
        dir / "pt" / "kinds.pt",
        io::PtValue(io::PtDict{
            {io::PtValue("t"), io::PtValue(io::PtTuple{{io::PtValue(1.5), io::PtValue()}})},
            {io::PtValue(7), io::PtValue(io::PtList{io::PtValue(true), io::PtValue(-1)})}}));
    // Bare pickles of every .pt seed (the pt target unpickles non-zip inputs directly).
    std::vector<std::filesystem::path> pt_files;
    for (const auto& entry : std::filesystem::directory_iterator(dir / "pt")) {
      pt_files.push_back(entry.path());
    }
    for (const auto& path : pt_files) {
      std::vector<const io::HostTensor*> storages;
      const std::string pickle = io::detail::pickle(io::read_pt_file(path), storages);
      io::write_file_atomically(path.string() + ".pkl", pickle);
    }
    // safetensors and JSON: counts, placement, mask; JSON also a snapshot of each mode.
    io::write_counts(dir / "safetensors" / "counts.safetensors", counts);
    io::write_placement(dir / "safetensors" / "placement.safetensors", placement);
    io::write_expert_mask(dir / "safetensors" / "mask.safetensors", mask);
    io::write_counts(dir / "json" / "counts.json", counts);
    io::write_placement(dir / "json" / "placement.json", placement);
    io::write_expert_mask(dir / "json" / "mask.json", mask);
    for (RecordMode mode :
         {RecordMode::kStat, RecordMode::kPerPass, RecordMode::kPerToken, RecordMode::kDecayed}) {
      io::write_file_atomically(dir / "json" / (std::string(record_mode_name(mode)) + ".json"),
                                io::snapshot_to_json(recorded(mode)));
    }
    // Routes: two requests, one with a position no pass routed; uint8 and uint16 ids.
    for (const std::int64_t experts : {4, 300}) {
      routes::CpuRouteRecorder recorder(ModelTopology::uniform(2, experts, 2), {});
      const std::vector<std::int32_t> ids = {0, 1, 3, 2, 1, 0};
      recorder.begin_pass();
      recorder.record_topk(0, TensorView::contiguous(ids.data(), DType::kInt32, {3, 2}));
      recorder.record_topk(1, TensorView::contiguous(ids.data(), DType::kInt32, {3, 2}));
      const routes::TokenSpan batch[] = {{"a", 0, 2}, {"b", 1, 1}};
      recorder.end_pass(batch);
      recorder.begin_pass();
      const routes::TokenSpan later[] = {{"a", 3, 0}};
      recorder.end_pass(later);
      const routes::RoutedExperts requests[] = {recorder.finish("a"), recorder.finish("b")};
      routes::write_routes_file(dir / "routes" / fmt::format("routes_{}.safetensors", experts),
                                requests);
    }
    // A rebalance simulation as `moestat simulate --json` writes it: two phases, a rebalance.
    io::write_file_atomically(
        dir / "simulation" / "simulation.json",
        R"({"scenarios": [{"name": "shift", "description": "a, then b", "num_passes": 100,)"
        R"( "block_passes": 50, "phases": [{"workload": "a.json", "num_passes": 60},)"
        R"( {"workload": "b.json", "num_passes": 40}], "policies": [{"policy": "advisor",)"
        R"( "role": "advisor", "mean_balancedness": 0.7, "moved_experts": 3,)"
        R"( "imbalance_seconds": 1.5, "move_seconds": 0.25, "rebalances": [{"pass": 50,)"
        R"( "moved_experts": 3, "max_moved_per_gpu": 1, "seconds": 0.25}],)"
        R"( "block_balancedness": [0.6, 0.8]}]}]})");
    {  // A trace of three chunks, complete once the writer is gone.
      io::TraceWriter trace(
          dir / "trace" / "trace.bin",
          {.num_layers = 2, .num_logical_experts = 3, .num_physical_experts = 4, .top_k = 2});
      const std::vector<std::int32_t> ids = {0, 1, 2, 3, -1, 0, 3, 3};
      trace.append(0, 0, ids);
      trace.append(1, 1, std::span(ids).first(4));
      trace.append(2, 1, std::span<const std::int32_t>());
    }
    // The same trace with a damaged magic.
    std::string damaged = io::read_text_file(dir / "trace" / "trace.bin");
    damaged[0] = char(damaged[0] ^ 0x20);
    io::write_file_atomically(dir / "trace" / "bad_magic.bin", damaged);
    // GGUF: an imatrix of two MoE blocks after a dense one, written as llama-imatrix does, and
    // a model's header with the metadata kinds the reader skips (arrays, a tokenizer).
    namespace gguf = test::gguf;
    io::write_file_atomically(dir / "gguf" / "imatrix.gguf",
                              gguf::imatrix({{1, {5, 0, 7, 12}}, {2, {1, 2, 3, 18}}},
                                            {{"general.architecture", gguf::str("qwen3moe")},
                                             {"qwen3moe.block_count", gguf::u32(3)}}));
    io::write_file_atomically(
        dir / "gguf" / "model.gguf",
        gguf::file({{"general.alignment", gguf::u32(64)},
                    {"tokenizer.ggml.tokens", gguf::strings({"<s>", "a", "b"})}},
                   {{"blk.0.ffn_up_exps.weight", {32, 2, 2}, 8, std::string(4 * 34, '\0')}}));
    write_hostile_seeds(dir);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "make_fuzz_seeds: %s\n", error.what());
    return 1;
  }
  return 0;
}
