"""Host time of one recording hook per MoE layer in each engine adapter, on the CPU: SGLang's
``on_select_experts`` (its ``_run_hook`` path), vLLM's router capture function and the
transformers router hook, each called as the engine calls it, inside an open pass, on the
same [tokens, top_k] int32 ids. The engines' forwards are left out: what is timed is what
moestat adds per layer (and per pass, for the pass's begin and end).

    PYTHONPATH=build/python .venv-engines/bin/python bench/engine_hook_cost.py \
        [--layers 48] [--tokens 1 256] [--passes 200]

Prints one JSON line per adapter and token count: microseconds per layer hook and per pass
(median of --repeats runs of --passes passes each), in CPU time of the calling thread, as the
C++ benchmarks count it, so that other processes on a shared machine do not count; and the
Python function calls per layer hook and per pass (cProfile's count over 10 passes), which no
other load on the machine changes.
"""

import argparse
import cProfile
import json
import pstats
import statistics
import time
import types

import torch

import moestat

EXPERTS = 128  # Qwen3-30B-A3B
TOP_K = 8


def sglang_pass(layers, ids):
    from moestat.sglang.recorder import MoestatExpertDistributionRecorder
    from moestat.sglang.config import RecorderConfig

    metadata = types.SimpleNamespace(
        num_layers=layers, num_logical_experts=EXPERTS, num_physical_experts=EXPERTS, ep_size=1,
        physical_to_logical_map=torch.arange(EXPERTS).repeat(layers, 1))
    recorder = MoestatExpertDistributionRecorder(
        metadata, 0, RecorderConfig(mode="stat", buffer_size=1000, device="cpu"))
    recorder.start_record()
    batch = types.SimpleNamespace()

    def one_pass():
        with recorder.with_forward_pass(0, batch):
            for layer in range(layers):
                with recorder.with_current_layer(layer):
                    recorder.on_select_experts(ids)

    def hooks_only():  # the layer scopes are SGLang's own, not moestat's cost
        with recorder.with_forward_pass(0, batch):
            for layer in range(layers):
                with recorder.with_current_layer(layer):
                    pass

    return one_pass, hooks_only


def vllm_pass(layers, ids):
    from moestat.vllm import recording

    topology = moestat.ModelTopology(layers, EXPERTS, TOP_K)
    recorder = moestat.CpuRecorder(topology, window_size=1000)
    recorder.start()
    runners = {}
    for layer in range(layers):
        router = types.SimpleNamespace(global_num_experts=EXPERTS, top_k=TOP_K, capture_fn=None)
        router.set_capture_fn = lambda fn, router=router: setattr(router, "capture_fn", fn)
        runners[layer] = types.SimpleNamespace(router=router)
    model = torch.nn.Linear(1, 1)
    handle = recording.RecordingHandle(model, recorder, runners, torch.device("cpu"), False)
    captures = [runners[layer].router.capture_fn for layer in range(layers)]

    def one_pass():
        handle.begin_pass()
        for capture in captures:
            capture(ids)
        handle.end_pass()

    def hooks_only():
        handle.begin_pass()
        handle.end_pass()

    return one_pass, hooks_only


def transformers_pass(layers, ids):
    from moestat.integrations import transformers as moestat_hf

    topology = moestat.ModelTopology(layers, EXPERTS, TOP_K)
    recorder = moestat.CpuRecorder(topology, window_size=1000)
    recorder.start()
    model = torch.nn.Linear(1, 1)
    routers = {layer: torch.nn.Identity() for layer in range(layers)}
    handle = moestat_hf.RecordingHandle(model, recorder, routers)
    output = (None, None, ids)

    def one_pass():
        handle._begin_pass(model, (), {})
        for layer, router in routers.items():
            handle._on_router(layer, router, (), output)
        handle._end_pass(model, (), output)

    def hooks_only():
        handle._begin_pass(model, (), {})
        handle._end_pass(model, (), output)

    return one_pass, hooks_only


ADAPTERS = {"sglang": sglang_pass, "vllm": vllm_pass, "transformers": transformers_pass}


def seconds_per_pass(function, passes):
    began = time.thread_time()
    for _ in range(passes):
        function()
    return (time.thread_time() - began) / passes


def python_calls(function, passes=10):
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(passes):
        function()
    profile.disable()
    return sum(entry[1] for entry in pstats.Stats(profile).stats.values()) / passes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 256])
    parser.add_argument("--passes", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--adapters", nargs="+", default=list(ADAPTERS))
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    for name in arguments.adapters:
        for tokens in arguments.tokens:
            ids = torch.randint(0, EXPERTS, (tokens, TOP_K), dtype=torch.int32)
            one_pass, hooks_only = ADAPTERS[name](arguments.layers, ids)
            one_pass()  # warm-up: first-call imports and allocations
            full, frame = [], []
            for _ in range(arguments.repeats):
                full.append(seconds_per_pass(one_pass, arguments.passes))
                frame.append(seconds_per_pass(hooks_only, arguments.passes))
            full, frame = statistics.median(full), statistics.median(frame)
            calls_full, calls_frame = python_calls(one_pass), python_calls(hooks_only)
            print(json.dumps(dict(
                adapter=name, tokens=tokens, layers=arguments.layers,
                us_per_layer_hook=round((full - frame) / arguments.layers * 1e6, 2),
                us_per_pass_frame=round(frame * 1e6, 2),
                calls_per_layer_hook=round((calls_full - calls_frame) / arguments.layers, 2),
                calls_per_pass_frame=calls_frame)), flush=True)


if __name__ == "__main__":
    main()
