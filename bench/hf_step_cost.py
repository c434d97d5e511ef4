"""What recording costs on a real forward pass: a transformers Qwen3-MoE model with the layer
shapes of Qwen3-30B-A3B (random bf16 weights), on one GPU, all in one process:

- decode steps (one token per sequence, a static KV cache of --context tokens) captured in a
  CUDA graph at batch 1, 16, 64 and 256;
- a prefill of 4096 tokens (one sequence), eager and in a CUDA graph;

each with recording off (no hooks), moestat (moestat.integrations.transformers with a
CudaRecorder; also its graph replayed with the recorder stopped), and SGLang-style recording
(a forward hook per router doing torch ops: mask the -1 ids, scatter_add_ into an int32
[layers, experts] buffer, as SGLang's single-pass gatherer does). Graphs also have "ids kept":
hooks that hold the routers' ids to the pass's end as moestat does and record nothing, whose
graph has moestat's memory layout without its kernels (at batch 1 the layout alone moves a
step by about 1%, either way, docs/transformers.md); moestat's own work is what moestat adds
beyond it. Variants are timed in turns,
--rounds times; the table (bench/hf_step_table.py) gives what each adds to the step, round by
round, as a median with its range, and says when that is within noise. --host-breakdown adds
the host time spent in the recording hooks of the eager prefill (bench/hf_hook_timer.py).
Rows print as they finish, with their seconds; --json is rewritten after every row, so a run
stopped early keeps the rows it finished.

    python bench/hf_step_cost.py --host-breakdown --json bench/results/hf_step_cost_h200.json
    python bench/hf_step_cost.py --layers 8 --batches 1 256 --rounds 3     (a quick look)
"""
import argparse
import contextlib
import json
import sys
import time

import torch
import transformers

import moestat
from moestat.integrations import transformers as moestat_hf
from moestat.integrations.forward_hooks import ForwardHooks

import hf_step_table
from hf_hook_timer import HookTimer

# Qwen3-30B-A3B's config.json (its layer shapes; the weights here are random).
QWEN3_30B_A3B = dict(
    hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_hidden_layers=48,
    num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
    num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
    vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
    tie_word_embeddings=False)
WARM_UP_STEPS = 3  # per variant, untimed, before the rounds


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=48, help="decoder layers (default 48)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--context", type=int, default=1024, help="KV cache length of decode")
    parser.add_argument("--prefill", type=int, default=4096, help="prefill tokens")
    # The defaults are to keep the full run (48 layers, 4 decode batches, prefill) within a
    # 10-minute call on the H200: an estimate scaled from an 8-layer run; each row prints its
    # seconds.
    parser.add_argument("--steps", type=int, default=10, help="steps timed per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds over the variants")
    parser.add_argument("--captures", type=int, default=3,
                        help="CUDA graphs captured per variant, each replayed in every step "
                             "(where a graph's memory lands moves its step time by up to "
                             "0.8%%: several captures average that out)")
    parser.add_argument("--experts", default="grouped_mm",
                        help="transformers experts implementation (one without host syncs)")
    parser.add_argument("--host-breakdown", action="store_true",
                        help="also time the host side of the recording hooks, eager prefill")
    parser.add_argument("--json", help="also write the results here")
    arguments = parser.parse_args()
    refuse_more_forwards_than_the_cache(parser, arguments)
    return arguments


def refuse_more_forwards_than_the_cache(parser, arguments) -> None:
    """Exits through parser.error unless the decode forwards between two rewinds of the cache
    (rewind(): one variant's steps, each replaying --captures graphs) fit its --context."""
    forwards = max(arguments.steps, WARM_UP_STEPS) * arguments.captures
    if forwards > arguments.context:
        parser.error(f"--steps {arguments.steps} (at least {WARM_UP_STEPS}) times --captures "
                     f"{arguments.captures} is {forwards} decode forwards between rewinds of the "
                     f"cache, more than its --context {arguments.context} tokens")


def build_model(arguments):
    config = transformers.Qwen3MoeConfig(**{**QWEN3_30B_A3B,
                                            "num_hidden_layers": arguments.layers})
    torch.manual_seed(0)
    with torch.device("cuda"):  # initialise the weights on the GPU: seconds, not minutes
        model = transformers.AutoModelForCausalLM.from_config(
            config, dtype=torch.bfloat16, experts_implementation=arguments.experts)
    return model.eval()


class SglangStyleRecording:
    """Counts each router's top-k ids with torch ops in a forward hook, as SGLang's
    single-pass gatherer does: ids of -1 masked, scatter_add_ into [layers, experts] int32."""

    def __init__(self, model):
        routers = moestat_hf.find_routers(model)
        config = model.config
        self.counts = torch.zeros(config.num_hidden_layers, config.num_experts,
                                  dtype=torch.int32, device=model.device)
        self._hooks = [router.register_forward_hook(self._hook_for(layer))
                       for layer, router in routers.items()]

    def _hook_for(self, layer):
        def record(router, args, output):
            ids = output[moestat_hf.TOP_K_IDS].flatten()
            real = ids != -1
            self.counts[layer].scatter_add_(0, ids.masked_fill(~real, 0).long(), real.int())
        return record

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        for hook in self._hooks:
            hook.remove()


class IdsKeptOnly(ForwardHooks):
    """moestat's hooks without moestat: each router's top-k ids are held to the pass's end, as
    moestat.torch_ops keeps them, and nothing is recorded. A graph captured with it has
    moestat's memory layout (the held ids move every later allocation of the pass) and none of
    its kernels, so it tells what moestat's own work adds from what the layout moves."""

    def __init__(self, model):
        super().__init__(model, moestat_hf.find_routers(model))
        self._kept = []

    def _begin_pass(self, model, args, kwargs):
        self._kept = []

    def _on_router(self, layer, router, args, output):
        self._kept.append(output[moestat_hf.TOP_K_IDS])

    def _end_pass(self, model, args, output):
        self._kept = []


def captured(step):
    """step() captured in a CUDA graph, after a warm-up on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def milliseconds_per_step(run, steps):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        run()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / steps


def rewind(step) -> None:
    """Puts the static KV cache of a decode step (step.cache) back at its start. Its layers
    write at a device counter that every forward, and every replay of a graph captured over
    it, advances by the forward's tokens whatever cache_position says: past the cache's end
    the write fails (a device-side assert on a GPU). reset() zeroes counter and cache in place,
    so the graphs captured over them stay valid. A step without a cache has none to rewind."""
    cache = getattr(step, "cache", None)
    if cache is not None:
        cache.reset()


def time_in_turns(runs: dict, step, arguments) -> dict:
    """{variant: [ms per step, one per round]}; each round times every variant once, in turn,
    so that clock and thermal drift fall on all of them alike. runs: {variant: (setup, run)},
    setup a context manager entered around the variant's steps, run calling step (or replaying
    its graphs), whose cache is rewound, untimed, before each variant's steps."""
    times = {variant: [] for variant in runs}
    for variant, (setup, run) in runs.items():  # warm-up
        rewind(step)
        with setup():
            milliseconds_per_step(run, WARM_UP_STEPS)
    for _ in range(arguments.rounds):
        for variant, (setup, run) in runs.items():
            rewind(step)
            with setup():
                times[variant].append(milliseconds_per_step(run, arguments.steps))
    return times


def eager_setups(model, recorder) -> dict:
    """{variant: a context manager that puts its recording on the model} for eager steps."""
    @contextlib.contextmanager
    def moestat_attached_and_recording():
        recorder.start()  # clears the last round's passes
        with moestat_hf.attach(model, recorder):
            yield

    return {"off": contextlib.nullcontext, "moestat": moestat_attached_and_recording,
            "sglang-style": lambda: SglangStyleRecording(model)}


def measure(model, recorder, step, graphs: bool, arguments) -> dict:
    """{variant: [ms per step, per round]} of step() with recording off, by moestat (also
    stopped) and SGLang-style; in CUDA graphs captured once per variant, or eagerly with the
    hooks on."""
    @contextlib.contextmanager
    def moestat_recording(on: bool):
        if on:
            recorder.start()  # clears the last round's passes
        else:
            recorder.stop()
        yield

    nothing = contextlib.nullcontext
    if graphs:
        # --captures graphs per variant, captured in turns; "off, recaptured" is a second set
        # of graphs of the step without recording, whose difference to "off" shows what the
        # capture alone moves.
        graph, kept = {}, []
        for _ in range(arguments.captures):
            for variant, hooks in (("off", nothing),
                                   ("moestat", lambda: moestat_hf.attach(model, recorder)),
                                   ("sglang-style", lambda: SglangStyleRecording(model)),
                                   ("ids kept", lambda: IdsKeptOnly(model)),
                                   ("off, recaptured", nothing)):
                with hooks() as recording:
                    graph.setdefault(variant, []).append(captured(step))
                kept.append(recording)  # the graphs write into its tensors: they must outlive it
                rewind(step)  # the capture's warm-up wrote to the cache

        def replay_each(variant):
            def replay():
                for one in graph[variant]:
                    one.replay()
            return replay

        runs = {
            "off": (nothing, replay_each("off")),
            "moestat": (lambda: moestat_recording(True), replay_each("moestat")),
            "moestat stopped": (lambda: moestat_recording(False), replay_each("moestat")),
            "sglang-style": (nothing, replay_each("sglang-style")),
            "ids kept": (nothing, replay_each("ids kept")),
            "off, recaptured": (nothing, replay_each("off, recaptured")),
        }
        times = time_in_turns(runs, step, arguments)
        recorder.stop()
        # A step of a variant replays each of its graphs once.
        return {variant: [ms / arguments.captures for ms in rounds]
                for variant, rounds in times.items()}
    else:
        runs = {variant: (setup, step) for variant, setup in eager_setups(model,
                                                                          recorder).items()}
    times = time_in_turns(runs, step, arguments)
    recorder.stop()
    return times


def host_breakdown(model, recorder, step, arguments) -> dict:
    """{variant: median host us in its hooks, per MoE layer and per pass} over eager steps;
    "off" is the timing hooks alone."""
    result = {}
    for variant, setup in eager_setups(model, recorder).items():
        rewind(step)
        with setup():
            timer = HookTimer(model)
            for _ in range(arguments.steps):
                step()
            timer.remove()
        torch.cuda.synchronize()
        result[variant] = timer.medians_us()
    recorder.stop()
    return result


def check_recorded(recorder, tokens: int, steps: int) -> str:
    """Whether moestat's last recorded round holds steps passes of tokens * top_k ids in every
    MoE layer: a recording that is fast because it counts nothing would fail here."""
    torch.cuda.synchronize()
    counts = recorder.snapshot().logical_counts
    moe = recorder.topology.moe_layers
    per_layer = counts.sum(axis=2)[:, moe]
    if counts.shape[0] == steps and (per_layer == tokens * recorder.topology.top_k).all():
        return "ok"
    return f"WRONG: {counts.shape[0]} passes, per-layer sums {sorted(set(per_layer.flat))[:4]}"


def decode_step(model, batch: int, context: int):
    """A step() decoding one token for each of batch sequences at position context - 1 of a
    static cache (its contents do not matter to the time); step.cache is the cache, which
    rewind() puts back at its start before it fills up."""
    cache = transformers.StaticCache(config=model.config, max_cache_len=context)
    input_ids = torch.randint(0, model.config.vocab_size, (batch, 1), device=model.device)
    position = torch.full((batch, 1), context - 1, device=model.device)
    cache_position = torch.tensor([context - 1], device=model.device)

    def step():
        model(input_ids=input_ids, position_ids=position, cache_position=cache_position,
              past_key_values=cache, use_cache=True, logits_to_keep=1)
    step.cache = cache  # for rewind()
    return step


def prefill_step(model, tokens: int):
    input_ids = torch.randint(0, model.config.vocab_size, (1, tokens), device="cuda")

    def step():
        model(input_ids=input_ids, use_cache=False, logits_to_keep=1)
    return step


def main() -> int:
    arguments = parse_arguments()
    if not (torch.cuda.is_available() and moestat.has_cuda):
        sys.exit("needs a GPU and moestat built with its CUDA recorder")
    began = time.time()
    model = build_model(arguments)
    recorder = moestat.CudaRecorder(moestat_hf.topology_from_config(model.config),
                                    max_tokens_per_pass=max(arguments.prefill,
                                                            max(arguments.batches)))
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "transformers": transformers.__version__, "layers": arguments.layers,
               "context": arguments.context, "experts": arguments.experts,
               "rounds": arguments.rounds, "steps": arguments.steps,
               "captures": arguments.captures,
               "rounds_ms": {}, "counts": {}, "host_us": {}}

    def run(name, step, tokens, graphs):
        row_began = time.time()
        results["rounds_ms"][name] = measure(model, recorder, step, graphs, arguments)
        # moestat's last round replayed each of its graphs once per step.
        passes = arguments.steps * (arguments.captures if graphs else 1)
        results["counts"][name] = check_recorded(recorder, tokens, passes)
        if arguments.host_breakdown and not graphs:
            results["host_us"][name] = host_breakdown(model, recorder, step, arguments)
        row = hf_step_table.step_table({name: results["rounds_ms"][name]},
                                       {name: results["counts"][name]})
        print(f"{row.splitlines()[-1]} ({time.time() - row_began:.0f} s)", flush=True)
        if arguments.json:
            with open(arguments.json, "w") as file:
                json.dump(results, file, indent=1)

    with torch.no_grad():
        for batch in arguments.batches:
            run(f"decode, batch {batch}, graph", decode_step(model, batch, arguments.context),
                batch, True)
            torch.cuda.empty_cache()
        step = prefill_step(model, arguments.prefill)
        for graphs in (False, True):
            run(f"prefill {arguments.prefill}, {'graph' if graphs else 'eager'}", step,
                arguments.prefill, graphs)
    print(f"\n{arguments.layers} layers of Qwen3-30B-A3B, bf16, {results['device']}, torch "
          f"{torch.__version__}, transformers {transformers.__version__}, experts "
          f"{arguments.experts}, {arguments.rounds} rounds of {arguments.steps} steps, "
          f"{arguments.captures} graphs per variant "
          f"({time.time() - began:.0f} s)\n")
    print(hf_step_table.step_table(results["rounds_ms"], results["counts"]))
    if results["host_us"]:
        print("\nHost time in the recording hooks of an eager step (median, us):\n")
        print(hf_step_table.host_table(results["host_us"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
