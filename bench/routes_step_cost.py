"""What capturing per-request routed experts (routing replay) costs a real decode step: a
transformers Qwen3-MoE model with the layer shapes of Qwen3-30B-A3B (random bf16 weights), one
GPU, each decode step (one token per sequence, a static KV cache) captured in a CUDA graph.

Variants, timed in turns over --rounds rounds, each captured --captures times:

- off: no capture (twice: "off, recaptured" is a second set of graphs, the floor under which
  no variant's cost can be told);
- moestat: a CudaRouteRecorder; the routers' ids are recorded by one launch per 32 layers at
  the end of the forward (inside the graph), and around each replay the host opens the pass
  and ends it with the batch's requests and positions (end_pass: the row moves' copy and one
  kernel); every 64 steps every request's rows are taken (one take_many()), as an engine hands
  them to the trainer;
- SGLang-style: what SGLang 0.5.23's routed-experts capturer does (state_capturer/base.py):
  a forward hook on every router writes ``device_cache[:n, layer, :] = topk_ids`` (int32,
  [max_batch, num_hidden_layers, top_k]) inside the graph; after each replay the overlap
  scheduler's path clones the batch's rows and copies them to pinned host memory
  (non-blocking), and the host scatters them into its [kv_slots, L, K] int32 cache by KV slot.

Per variant: ms per step, what it adds against "off" (median over rounds, with the range), that
per MoE layer, and the bytes each keeps per token. The rows captured are checked: a capture
that is fast because it records nothing fails the run.

    python bench/routes_step_cost.py --json bench/results/routes_step_cost_h200.json
    python bench/routes_step_cost.py --layers 8 --batches 1 --rounds 3     (a quick look)
"""
import argparse
import json
import statistics
import sys
import time

import numpy as np
import torch
import transformers
from torch.utils.dlpack import to_dlpack

import moestat
from moestat.integrations import transformers as moestat_hf

import hf_step_cost
from sglang_style_routes import SglangStyleRoutes

VARIANTS = ("off", "moestat", "sglang-style", "off, recaptured")


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20, help="steps timed per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--captures", type=int, default=2)
    parser.add_argument("--experts", default="grouped_mm")
    parser.add_argument("--json")
    arguments = parser.parse_args()
    hf_step_cost.refuse_more_forwards_than_the_cache(parser, arguments)
    return arguments


class KeptRouterIds:
    """Forward hooks that keep each router's top-k ids of the forward running now."""

    def __init__(self, routers):
        self.ids = {}
        self._hooks = [router.register_forward_hook(self._hook_for(layer))
                       for layer, router in routers.items()]

    def _hook_for(self, layer):
        def keep(router, args, output):
            self.ids[layer] = output[moestat_hf.TOP_K_IDS]
        return keep

    def remove(self):
        for hook in self._hooks:
            hook.remove()


class MoestatCapture:
    """A CudaRouteRecorder fed at the end of each forward (captured in the graph)."""

    def __init__(self, model, batch):
        self.routers = moestat_hf.find_routers(model)
        topology = moestat_hf.topology_from_config(model.config)
        self.recorder = moestat.CudaRouteRecorder(topology, max_tokens_per_pass=batch,
                                                  capacity_tokens=batch * 128)
        self.batch = batch
        self.positions = np.zeros(batch, dtype=np.int64)
        self.steps = 0
        self.taken_rows = 0

    def attach(self, model):
        kept = KeptRouterIds(self.routers)
        recorder = self.recorder

        def record_at_end(module, args, output):
            if not torch.cuda.is_current_stream_capturing():
                return  # the warm-up before capture: no pass is open
            layers = sorted(kept.ids)
            recorder.set_stream(torch.cuda.current_stream().cuda_stream)
            recorder.record_topk_layers(layers, [to_dlpack(kept.ids[layer]) for layer in layers])
        end = model.register_forward_hook(record_at_end)
        return kept, end

    def around_replay(self, replay):
        self.recorder.set_stream(torch.cuda.current_stream().cuda_stream)
        self.recorder.begin_pass()
        replay()
        self.recorder.end_pass([(f"r{b}", int(self.positions[b]), 1) for b in range(self.batch)])
        self.positions += 1
        self.steps += 1
        if self.steps % 64 == 0:
            self.take()

    def take(self):
        for routes in self.recorder.take_many([f"r{b}" for b in range(self.batch)]):
            assert routes.complete, f"request {routes.request_id}: rows not recorded"
            self.taken_rows += routes.num_tokens


class SglangStyleCapture(SglangStyleRoutes):
    """SGLang 0.5.23's BaseDeviceCache.capture in every router, and on_forward_end's copy to
    the host cache indexed by KV slot (its overlap-scheduler path)."""

    def __init__(self, model, batch):
        config = model.config
        self.routers = moestat_hf.find_routers(model)
        super().__init__(batch, config.num_hidden_layers, config.num_experts_per_tok, 128)

    def attach(self, model):
        def hook_for(layer):
            def capture(router, args, output):
                self.write(layer, output[moestat_hf.TOP_K_IDS])
            return capture
        return [router.register_forward_hook(hook_for(layer))
                for layer, router in self.routers.items()]

    def around_replay(self, replay):
        self.around(replay)


def measure(model, batch, arguments):
    step = hf_step_cost.decode_step(model, batch, arguments.context)

    graphs = {variant: [] for variant in VARIANTS}
    moestat_capture = MoestatCapture(model, batch)
    sglang_capture = SglangStyleCapture(model, batch)
    for _ in range(arguments.captures):
        for variant in VARIANTS:
            if variant == "moestat":
                kept, end = moestat_capture.attach(model)
                graphs[variant].append(hf_step_cost.captured(step))
                kept.remove()
                end.remove()
            elif variant == "sglang-style":
                hooks = sglang_capture.attach(model)
                graphs[variant].append(hf_step_cost.captured(step))
                for hook in hooks:
                    hook.remove()
            else:
                graphs[variant].append(hf_step_cost.captured(step))
            hf_step_cost.rewind(step)  # the capture's warm-up wrote to the cache

    def run(variant):
        def one_step():
            for graph in graphs[variant]:
                if variant == "moestat":
                    moestat_capture.around_replay(graph.replay)
                elif variant == "sglang-style":
                    sglang_capture.around_replay(graph.replay)
                else:
                    graph.replay()
        return one_step

    times = {variant: [] for variant in VARIANTS}
    for variant in VARIANTS:  # warm-up
        hf_step_cost.rewind(step)
        hf_step_cost.milliseconds_per_step(run(variant), hf_step_cost.WARM_UP_STEPS)
    for _ in range(arguments.rounds):
        for variant in VARIANTS:
            hf_step_cost.rewind(step)
            times[variant].append(
                hf_step_cost.milliseconds_per_step(run(variant), arguments.steps)
                / arguments.captures)
    sglang_capture.finalize()
    torch.cuda.synchronize()
    moestat_capture.take()
    recorded = moestat_capture.taken_rows
    expected = batch * moestat_capture.steps
    tallies = moestat_capture.recorder.tallies()
    check = ("ok" if recorded == expected and tallies["invalid_ids"] == 0
             and tallies["layers_written_twice"] == 0
             else f"WRONG: {recorded} rows taken of {expected}, tallies {tallies}")
    layout = moestat_capture.recorder.layout
    config = model.config
    return {
        "rounds_ms": times,
        "check": check,
        "bytes_per_token": {
            "moestat": layout.bytes_per_token,
            "sglang-style": 4 * config.num_hidden_layers * config.num_experts_per_tok,
        },
    }


def table(results, num_moe_layers):
    lines = ["| decode step | off (ms) | off recaptured added | moestat added | moestat per "
             "MoE layer (us) | SGLang-style added | SGLang-style per MoE layer (us) | "
             "SGLang-style / moestat | bytes/token moestat vs SGLang | rows |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, result in results.items():
        rounds = result["rounds_ms"]
        off = statistics.median(rounds["off"])

        def added(variant):
            extra = [t - o for t, o in zip(rounds[variant], rounds["off"])]
            return statistics.median(extra), min(extra), max(extra)

        cells = [name, f"{off:.4f}"]
        for variant in ("off, recaptured", "moestat", "sglang-style"):
            middle, low, high = added(variant)
            cells.append(f"{middle * 1000:+.1f} us ({100 * middle / off:+.2f}%) "
                         f"[{low * 1000:+.1f}, {high * 1000:+.1f}]")
            if variant != "off, recaptured":
                cells.append(f"{middle * 1000 / num_moe_layers:.2f}")
        moestat_added, sglang_added = added("moestat")[0], added("sglang-style")[0]
        cells.append(f"{sglang_added / moestat_added:.1f}x" if moestat_added > 0
                     else "moestat within noise")
        sizes = result["bytes_per_token"]
        cells.append(f"{sizes['moestat']} vs {sizes['sglang-style']} "
                     f"({sizes['sglang-style'] / sizes['moestat']:.1f}x)")
        cells.append(result["check"])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    arguments = parse_arguments()
    if not (torch.cuda.is_available() and moestat.has_cuda):
        sys.exit("needs a GPU and moestat built with its CUDA recorders")
    began = time.time()
    model = hf_step_cost.build_model(arguments)
    num_moe_layers = len(moestat_hf.find_routers(model))
    results = {}
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "layers": arguments.layers, "rounds": arguments.rounds, "steps": arguments.steps,
              "captures": arguments.captures, "results": results}
    with torch.no_grad():
        for batch in arguments.batches:
            row_began = time.time()
            results[f"batch {batch}"] = measure(model, batch, arguments)
            print(f"batch {batch}: {results[f'batch {batch}']['check']} "
                  f"({time.time() - row_began:.0f} s)", flush=True)
            if arguments.json:
                with open(arguments.json, "w") as file:
                    json.dump(report, file, indent=1)
            torch.cuda.empty_cache()
    print(f"\n{arguments.layers} layers of Qwen3-30B-A3B, bf16, {report['device']}, torch "
          f"{torch.__version__}, transformers {transformers.__version__}, {arguments.rounds} "
          f"rounds of {arguments.steps} steps, {arguments.captures} graphs per variant "
          f"({time.time() - began:.0f} s)\n")
    print(table(results, num_moe_layers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
