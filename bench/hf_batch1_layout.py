"""Where a captured batch-1 decode step's recording time goes (bench/hf_step_cost.py's model
and step): each CUDA graph is timed alone, so what a capture's memory layout moves shows apart
from what a variant adds, and the recorder's kernels in one replay are listed.

Variants, each captured --captures times in turns: off; moestat (attached, recording);
"ids kept" (hf_step_cost.IdsKeptOnly: moestat's hooks holding the routers' ids to the pass's
end, recording nothing: moestat's memory layout without its kernels); "begin/end only" (the
recorder's begin_pass and end_pass around the forward, no router hooks: moestat's pass kernels
without its layout); SGLang-style. Rounds time every graph once, in rotated order.

    cd bench && python hf_batch1_layout.py [--layers 48] [--captures 3] [--rounds 7]
"""
import argparse
import contextlib
import statistics

import torch
from torch.profiler import ProfilerActivity, profile

import moestat
from moestat.integrations import transformers as moestat_hf
from moestat.integrations.forward_hooks import ForwardHooks

import hf_step_cost


class BeginEndOnly(ForwardHooks):
    """The recorder's begin_pass and end_pass around each forward, and nothing at the routers."""

    def __init__(self, model, recorder):
        super().__init__(model, {})
        self.recorder = recorder
        self.passes = 0

    def _begin_pass(self, model, args, kwargs):
        self.recorder.set_stream(torch.cuda.current_stream().cuda_stream)
        self.recorder.begin_pass(self.passes)
        self.passes += 1

    def _on_router(self, layer, router, args, output):
        pass

    def _end_pass(self, model, args, output):
        self.recorder.end_pass()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--captures", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20, help="replays timed per graph and round")
    arguments = parser.parse_args()
    model = hf_step_cost.build_model(argparse.Namespace(layers=arguments.layers,
                                                        experts="grouped_mm"))
    recorder = moestat.CudaRecorder(moestat_hf.topology_from_config(model.config),
                                    max_tokens_per_pass=256)
    step = hf_step_cost.decode_step(model, 1, 1024)
    variants = {"off": contextlib.nullcontext,
                "moestat": lambda: moestat_hf.attach(model, recorder),
                "ids kept": lambda: hf_step_cost.IdsKeptOnly(model),
                "begin/end only": lambda: BeginEndOnly(model, recorder),
                "sglang-style": lambda: hf_step_cost.SglangStyleRecording(model)}
    graphs, kept = {}, []
    with torch.no_grad():
        for _ in range(arguments.captures):
            for name, hooks in variants.items():
                with hooks() as recording:
                    graphs.setdefault(name, []).append(hf_step_cost.captured(step))
                kept.append(recording)  # the graphs write into its tensors
                hf_step_cost.rewind(step)
        recorder.start()
        keys = [(name, capture) for name in graphs for capture in range(arguments.captures)]
        times = {key: [] for key in keys}
        for round_index in range(arguments.rounds):
            shift = round_index % len(keys)
            for name, capture in keys[shift:] + keys[:shift]:
                hf_step_cost.rewind(step)
                times[name, capture].append(hf_step_cost.milliseconds_per_step(
                    graphs[name][capture].replay, arguments.steps))
        median = {key: statistics.median(rounds) for key, rounds in times.items()}
        off = statistics.median(median["off", c] for c in range(arguments.captures))
        print(f"{arguments.layers} layers, batch 1; ms per step of each capture (median of "
              f"{arguments.rounds} rounds), then the median capture and what it adds to off")
        for name in graphs:
            per_capture = [median[name, c] for c in range(arguments.captures)]
            middle = statistics.median(per_capture)
            print(f"{name:15s} " + " ".join(f"{ms:.4f}" for ms in per_capture) +
                  f"  median {middle:.4f}  added {middle - off:+.4f} ms "
                  f"({100 * (middle - off) / off:+.2f}%)")
        for name in ("off", "moestat"):
            hf_step_cost.rewind(step)
            with profile(activities=[ProfilerActivity.CUDA]) as profiler:
                graphs[name][0].replay()
                torch.cuda.synchronize()
            kernels = [event for event in profiler.events() if event.device_type.name == "CUDA"]
            print(f"{name}: {len(kernels)} kernels in one replay, "
                  f"{sum(event.device_time for event in kernels):.1f} us of kernel time")
            for event in kernels:
                kernel = event.name.replace("(anonymous namespace)::", "").split("(")[0]
                if name == "moestat" and "moestat::" in kernel:
                    print(f"  {event.device_time:6.2f} us  {kernel}")


if __name__ == "__main__":
    main()
