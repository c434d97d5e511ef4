"""What recording costs a forward pass behind SGLang's recorder interface: SGLang's own
recorder (sglang 0.5.23's expert_distribution.py) against moestat.sglang, same process, same
inputs, on a GPU.

For each batch size, a pass is ``with_forward_pass`` around ``layers`` MoE layers, each calling
``on_select_experts`` with that layer's [tokens, 8] int32 top-k ids (-1 padding rows past the
real batch, as SGLang's captured graphs have), measured two ways:
- eager: the hooks run from Python (prefill, or decode without CUDA graphs);
- graph: the hooks were captured once in a CUDA graph outside any pass, as SGLang captures
  its decode graphs, and each pass replays it.
Every layer also does one small kernel of its own (the model's work, here a stand-in), and
the baseline is the same pass with SGLang's no-op recorder. The table gives what each
recorder adds to a pass, recording and stopped (a captured graph's hooks still replay while
stopped), in total and per layer.

    PYTHONPATH=build/python:tests/engines MOESTAT_SGLANG_WHEEL=sglang.whl \\
        python3 bench/sglang_dropin_cost.py [--layers 48] [--tokens 1 64 256 4096]
"""

import argparse
import json
import statistics
import sys

import torch

import sglang_harness

import moestat.sglang

EXPERTS = 128  # Qwen3-30B-A3B
TOP_K = 8


def make_recorders(layers):
    module, config = sglang_harness.load_sglang_expert_distribution()
    config.exec.moe.expert_distribution_recorder_mode = "stat"
    config.exec.moe.expert_distribution_recorder_buffer_size = 1000
    config.device.device = "cuda"
    metadata = sglang_harness.make_metadata(layers, EXPERTS, EXPERTS, 1, device="cuda")
    recorders = {
        "sglang": module.ExpertDistributionRecorder.init_new(metadata, rank=0),
        "moestat": moestat.sglang.ExpertDistributionRecorder.init_new(metadata, rank=0),
    }
    config.exec.moe.expert_distribution_recorder_mode = None
    return {"none": module.ExpertDistributionRecorder.init_new(metadata, rank=0), **recorders}


def layer_hooks(recorder, ids, work):
    for layer in range(ids.shape[0]):
        work.add_(1)  # the layer's own work
        with recorder.with_current_layer(layer):
            recorder.on_select_experts(ids[layer])


def time_passes(recorder, run_layers, batch, iterations):
    """Median over 5 rounds of the mean time of one pass, in microseconds."""
    rounds = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for step in range(iterations):
            with recorder.with_forward_pass(step, batch):
                run_layers()
        end.record()
        torch.cuda.synchronize()
        rounds.append(start.elapsed_time(end) * 1000 / iterations)
    return statistics.median(rounds), (max(rounds) - min(rounds)) / 2


def measure(layers, tokens, iterations):
    recorders = make_recorders(layers)
    generator = torch.Generator(device="cuda").manual_seed(tokens)
    ids = torch.randint(0, EXPERTS, (layers, tokens, TOP_K), dtype=torch.int32, device="cuda",
                        generator=generator)
    ids[:, tokens * 7 // 8:] = -1  # the padded tail of a captured batch
    batch = sglang_harness.make_forward_batch(tokens, "decode", device="cuda")
    work = torch.zeros(1024, device="cuda")
    rows = []
    for name, recorder in recorders.items():
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            layer_hooks(recorder, ids, work)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            layer_hooks(recorder, ids, work)
        result = {"recorder": name, "layers": layers, "tokens": tokens}
        for how, run in (("eager", lambda: layer_hooks(recorder, ids, work)),
                         ("graph", graph.replay)):
            for state in ("on", "off"):
                if name != "none":
                    (recorder.start_record if state == "on" else recorder.stop_record)()
                result[f"{how}_{state}_us"], result[f"{how}_{state}_spread_us"] = time_passes(
                    recorder, run, batch, iterations)
        if name != "none":  # one recorded pass: both must have counted it
            recorder.start_record()
            with recorder.with_forward_pass(0, batch):
                graph.replay()
            result["counted"] = int(recorder.dump_record("object")["logical_count"].sum())
        rows.append(result)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 64, 256, 4096])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    # Both recorders all-reduce their dumps over the default group: one process of one rank.
    torch.distributed.init_process_group("nccl", init_method="tcp://127.0.0.1:29513", rank=0,
                                         world_size=1, device_id=torch.device("cuda", 0))
    rows = [row for tokens in args.tokens for row in measure(args.layers, tokens, args.iterations)]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.layers} layers of "
          f"{EXPERTS} experts, top-{TOP_K}, median of 5 rounds of {args.iterations} passes")
    print("| tokens | recorder | eager, recording: added per pass (us) | per layer | "
          "eager, stopped | graph, recording: added per pass (us) | per layer | "
          "graph, stopped | counted |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    baseline = {row["tokens"]: row for row in rows if row["recorder"] == "none"}
    for row in rows:
        if row["recorder"] == "none":
            continue
        base = baseline[row["tokens"]]
        added = {key: row[f"{key}_us"] - base[f"{key}_us"]
                 for key in ("eager_on", "eager_off", "graph_on", "graph_off")}
        spread = {key: row[f"{key}_spread_us"] + base[f"{key}_spread_us"] for key in added}
        print(f"| {row['tokens']} | {row['recorder']} "
              f"| {added['eager_on']:.1f} ± {spread['eager_on']:.1f} "
              f"| {added['eager_on'] / row['layers']:.2f} "
              f"| {added['eager_off']:.1f} ± {spread['eager_off']:.1f} "
              f"| {added['graph_on']:.1f} ± {spread['graph_on']:.1f} "
              f"| {added['graph_on'] / row['layers']:.2f} "
              f"| {added['graph_off']:.1f} ± {spread['graph_off']:.1f} | {row['counted']} |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
