"""What capturing per-request routed experts adds to a decode step, measured on the capture
alone: a CUDA graph of --layers routers (each the top-k of [batch, --experts] float logits, as
int32 ids), replayed step after step, bare and with each capture, at decode batches 1 to 256.
A real model's step (bench/routes_step_cost.py) is 14-105 ms, and two captures of the same
step differ by tens of microseconds, which hides what a capture adds; here the step is the
routers alone (about 0.1-0.3 ms), so what the capture adds is told apart to a fraction of a
microsecond per layer.

Variants, timed in turns over --rounds rounds of --steps steps each (a step: whatever the
host does around one replay, then the replay; the clock stops after the GPU has finished):

- bare: the routers' graph, nothing recorded;
- moestat: a CudaRouteRecorder; one record_topk_layers launch at the graph's end records
  every router's ids; around each replay begin_pass() and end_pass(batch) with the batch's
  requests and positions (one kernel); every 64 steps every request's rows are handed out in
  one read, as an engine hands finished requests to the trainer. When, --pattern says:
  - finish (the default): every 64 steps the batch's requests finish and new ones take their
    rows; finish_many() hands the finished ones out after the next step is queued, as an
    engine's overlap scheduler handles a step's results while the next step runs;
  - take: the same requests decode throughout, and take_many() hands their rows out right
    after the step that wrote the last of them (the GPU's queue is empty while it reads);
- moestat, take each: the same, every request's rows taken by a take() (finish()) of its
  own, as before take_many() existed (one copy and one wait per request);
- SGLang-style: what SGLang 0.5.23's routed-experts capturer does: every router writes
  ``device_cache[:n, layer, :] = topk_ids`` inside the graph; after each replay the rows are
  cloned and copied to pinned host memory (non-blocking), and the previous step's rows are
  scattered into the [kv_slots, layers, top_k] int32 host cache by KV slot.

Printed per batch: the bare step (us), what each capture adds per step and per layer (median
over rounds, with the smallest and largest), and SGLang-style / moestat. Every request's rows
are checked complete after the run: a capture that is fast because it records nothing fails.
--breakdown then prints where moestat's GPU time goes: each of its kernels and copies, per
step, from torch.profiler over one round.

    python bench/routes_capture_cost.py --json bench/results/routes_capture_cost_h100.json
    python bench/routes_capture_cost.py --batches 1 64 --rounds 3        (a quick look)
"""
import argparse
import json
import re
import statistics
import sys
import time

import torch
from torch.utils.dlpack import to_dlpack

import moestat
from sglang_style_routes import SglangStyleRoutes

VARIANTS = ("bare", "moestat", "moestat, take each", "sglang-style")
TAKE_EVERY = 64


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=48, help="MoE layers (routers) per step")
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--steps", type=int, default=256, help="steps timed per round")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--pattern", choices=("finish", "take"), default="finish",
                        help="when moestat's rows are handed out (above; default: finish)")
    parser.add_argument("--breakdown", action="store_true",
                        help="also print moestat's GPU time per step by kernel and copy")
    parser.add_argument("--json", help="write the rounds and the table's numbers here")
    return parser.parse_args()


class Routers:
    """The step's routers: per layer, the top-k of that layer's logits as int32 ids."""

    def __init__(self, arguments, batch):
        self.logits = torch.randn(arguments.layers, batch, arguments.experts, device="cuda")
        self.top_k = arguments.top_k

    def __call__(self):
        return [torch.topk(layer_logits, self.top_k, dim=-1).indices.to(torch.int32)
                for layer_logits in self.logits]


class MoestatCapture:
    def __init__(self, arguments, batch, take_each=False):
        topology = moestat.ModelTopology.uniform(arguments.layers, arguments.experts,
                                                 arguments.top_k)
        self.take_each = take_each
        self.finishing = arguments.pattern == "finish"
        self.recorder = moestat.CudaRouteRecorder(topology, max_tokens_per_pass=batch,
                                                  capacity_tokens=batch * 2 * TAKE_EVERY)
        self.layers = list(range(arguments.layers))
        self.batch = batch
        self.steps = 0
        self.rows_taken = 0
        self.finished = []

    def in_graph(self, ids):
        self.recorder.set_stream(torch.cuda.current_stream().cuda_stream)
        self.recorder.record_topk_layers(self.layers, [to_dlpack(layer_ids) for layer_ids in ids])

    def requests(self):
        generation = self.steps // TAKE_EVERY if self.finishing else 0
        return [f"request-{generation}-{b}" for b in range(self.batch)]

    def around(self, replay):
        requests = self.requests()
        position = self.steps % TAKE_EVERY if self.finishing else self.steps
        self.recorder.begin_pass()
        replay()
        self.recorder.end_pass([(request, position, 1) for request in requests])
        # The requests that finished with the step before this one, handed out while this
        # one runs.
        self.hand_out(self.finished)
        self.finished = []
        self.steps += 1
        if self.steps % TAKE_EVERY == 0:
            if self.finishing:
                self.finished = requests
            else:
                self.hand_out(requests)

    def hand_out(self, requests):
        if not requests:
            return
        read_one = self.recorder.finish if self.finishing else self.recorder.take
        read_many = self.recorder.finish_many if self.finishing else self.recorder.take_many
        taken = ([read_one(request) for request in requests] if self.take_each
                 else read_many(requests))
        for routes in taken:
            assert routes.complete, f"{routes.request_id}: rows not recorded"
            self.rows_taken += routes.num_tokens

    def flush(self):
        """Hands out what the last steps wrote: the rows of the requests still decoding."""
        self.hand_out(self.finished)
        self.finished = []
        self.hand_out(self.requests())


class SglangStyleCapture(SglangStyleRoutes):
    def __init__(self, arguments, batch):
        super().__init__(batch, arguments.layers, arguments.top_k, TAKE_EVERY)

    def in_graph(self, ids):
        for layer, layer_ids in enumerate(ids):
            self.write(layer, layer_ids)


def capture_graph(routers, capture):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        routers()  # warm-up outside the graph: nothing is recorded
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ids = routers()
        if capture is not None:
            capture.in_graph(ids)
    return graph


def microseconds_per_step(step, steps):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e6 / steps


def measure(arguments, batch):
    routers = Routers(arguments, batch)
    captures = {"bare": None,
                "moestat": MoestatCapture(arguments, batch),
                "moestat, take each": MoestatCapture(arguments, batch, take_each=True),
                "sglang-style": SglangStyleCapture(arguments, batch)}
    graphs = {variant: capture_graph(routers, capture) for variant, capture in captures.items()}
    for variant in ("moestat", "moestat, take each"):
        # Passes end on the stream the graphs replay on, not the one they were captured on.
        captures[variant].recorder.set_stream(torch.cuda.current_stream().cuda_stream)

    def step_of(variant):
        if captures[variant] is None:
            return graphs[variant].replay
        return lambda: captures[variant].around(graphs[variant].replay)
    steps = {variant: step_of(variant) for variant in VARIANTS}
    for variant in VARIANTS:  # warm-up
        microseconds_per_step(steps[variant], TAKE_EVERY)
    rounds = {variant: [] for variant in VARIANTS}
    for _ in range(arguments.rounds):
        for variant in VARIANTS:
            rounds[variant].append(microseconds_per_step(steps[variant], arguments.steps))
    captures["sglang-style"].finalize()
    checks = []
    breakdown = gpu_time_by_kernel(steps["moestat"], arguments.steps) if arguments.breakdown else {}
    for variant in ("moestat", "moestat, take each"):
        capture = captures[variant]
        capture.flush()
        tallies = capture.recorder.tallies()
        expected = batch * capture.steps
        if (capture.rows_taken != expected or tallies["invalid_ids"] != 0
                or tallies["layers_written_twice"] != 0):
            checks.append(f"{variant} WRONG: {capture.rows_taken} rows taken of {expected}, "
                          f"{tallies}")
    return {"rounds_us": rounds, "breakdown_us": breakdown, "check": "; ".join(checks) or "ok"}


def gpu_time_by_kernel(step, steps):
    """moestat's kernels and copies over `steps` steps, in GPU microseconds per step; the
    routers' own kernels (topk, the int32 conversion) are left out."""
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profile:
        microseconds_per_step(step, steps)
    times = {}
    for event in profile.key_averages():
        name = event.key
        if "route" in name or "Memcpy" in name or "memcpy" in name:
            kernel = re.search(r"\w+_kernel", name)
            short = kernel.group(0) if kernel else name
            times[short] = times.get(short, 0.0) + event.device_time_total / steps
    return dict(sorted(times.items(), key=lambda item: -item[1]))


def added(result, variant):
    rounds = result["rounds_us"]
    extra = [v - b for v, b in zip(rounds[variant], rounds["bare"])]
    return statistics.median(extra), min(extra), max(extra)


def table(results, layers):
    lines = ["| batch | bare step (us) | moestat added per step (us) [range] | moestat per "
             "layer (us) | take each: added per step (us) [range] | take each: per layer (us) "
             "| SGLang-style added per step (us) [range] | SGLang-style per layer (us) | "
             "SGLang-style / moestat | rows |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for batch, result in results.items():
        cells = [str(batch), f"{statistics.median(result['rounds_us']['bare']):.1f}"]
        for variant in VARIANTS[1:]:
            middle, low, high = added(result, variant)
            cells += [f"{middle:+.1f} [{low:+.1f}, {high:+.1f}]", f"{middle / layers:.3f}"]
        ours, theirs = added(result, "moestat")[0], added(result, "sglang-style")[0]
        cells.append(f"{theirs / ours:.1f}x" if ours > 0 else "moestat adds nothing measurable")
        cells.append(result["check"])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    arguments = parse_arguments()
    if not torch.cuda.is_available():
        print("routes_capture_cost: no CUDA device", file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {arguments.layers} "
          f"layers, {arguments.experts} experts, top-{arguments.top_k}, pattern "
          f"{arguments.pattern}", flush=True)
    results = {}
    for batch in arguments.batches:
        results[batch] = measure(arguments, batch)
        print(f"batch {batch}: {results[batch]['check']}", flush=True)
    print(table(results, arguments.layers))
    if arguments.breakdown:
        print(f"\nmoestat's GPU time per step (us), pattern {arguments.pattern}:")
        for batch, result in results.items():
            parts = ", ".join(f"{name} {us:.2f}" for name, us in result["breakdown_us"].items())
            print(f"batch {batch}: {parts}")
    if arguments.json:
        with open(arguments.json, "w") as out:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "arguments": vars(arguments), "results": results}, out, indent=1)
    return 0 if all(result["check"] == "ok" for result in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
