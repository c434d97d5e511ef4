"""bench/hf_step_cost.py's decode step over a static KV cache: the cache writes at a counter
that every forward (and every replay of a graph captured over it) advances, whatever
cache_position says, so a long run must rewind it. Here a tiny random Qwen3-MoE model runs the
benchmark's own measure() for many more forwards than the cache holds: eagerly on the CPU, and
in CUDA graphs on a GPU (skipped without one)."""
import argparse
import pathlib
import sys

import pytest
import torch

import moestat
from moestat.integrations import transformers as moestat_hf

import hf_models

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import hf_step_cost  # noqa: E402 (bench/ is not a package)

CONTEXT = 8  # tokens of the static cache
BATCH = 2


def benchmark_arguments(**overrides):
    """What measure() reads of the command line: rounds * variants * steps * captures decode
    forwards, many times CONTEXT."""
    values = dict(rounds=12, steps=4, captures=2, context=CONTEXT)
    values.update(overrides)
    return argparse.Namespace(**values)


def forwards_of(model) -> list:
    """A list that gets an entry at every forward of model."""
    forwards = []
    model.register_forward_pre_hook(lambda module, args: forwards.append(None))
    return forwards


def write_positions(step) -> set:
    """Where each layer of the step's static cache writes next."""
    return {int(layer.cumulative_length) for layer in step.cache.layers}


def untimed(run, steps):
    """milliseconds_per_step without CUDA events, for the CPU."""
    for _ in range(steps):
        run()
    return 0.0


def test_without_a_rewind_the_static_cache_overflows():
    # The premise of rewind(): if the cache wrote at cache_position instead, this would pass
    # and the test below would prove nothing.
    model = hf_models.tiny_model("qwen3_moe")
    step = hf_step_cost.decode_step(model, BATCH, CONTEXT)
    with torch.no_grad():
        for _ in range(CONTEXT):
            step()
        assert write_positions(step) == {CONTEXT}
        with pytest.raises(IndexError):
            step()


def test_many_rounds_of_eager_decode_steps_stay_within_the_cache(monkeypatch):
    monkeypatch.setattr(hf_step_cost, "milliseconds_per_step", untimed)
    model = hf_models.tiny_model("qwen3_moe")
    step = hf_step_cost.decode_step(model, BATCH, CONTEXT)
    recorder = moestat.CpuRecorder(moestat_hf.topology_from_config(model.config))
    arguments = benchmark_arguments(captures=1)
    forwards = forwards_of(model)
    with torch.no_grad():
        times = hf_step_cost.measure(model, recorder, step, False, arguments)
    assert {variant: len(rounds) for variant, rounds in times.items()} == {
        "off": 12, "moestat": 12, "sglang-style": 12}
    assert len(forwards) == 3 * (hf_step_cost.WARM_UP_STEPS + 12 * 4) > 10 * CONTEXT
    assert write_positions(step) == {4}, "rewound before the last round's steps"


def test_timed_forwards_that_do_not_fit_the_cache_are_refused(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["hf_step_cost.py", "--context", "16", "--steps", "9",
                                      "--captures", "2"])
    with pytest.raises(SystemExit):
        hf_step_cost.parse_arguments()
    assert "18 decode forwards between rewinds of the cache, more than its --context 16" in (
        capsys.readouterr().err)


@pytest.mark.skipif(not (moestat.has_cuda and torch.cuda.is_available()),
                    reason="needs moestat's CUDA recorder and a GPU")
def test_many_rounds_of_decode_graph_replays_stay_within_the_cache():
    # Experts as batched matmuls: the default loop over the hit experts cannot be captured.
    model = hf_models.tiny_model("qwen3_moe", experts_implementation="batched_mm").to(
        "cuda", torch.bfloat16)
    step = hf_step_cost.decode_step(model, BATCH, CONTEXT)
    recorder = moestat.CudaRecorder(moestat_hf.topology_from_config(model.config),
                                    max_tokens_per_pass=BATCH)
    arguments = benchmark_arguments()
    with torch.no_grad():
        times = hf_step_cost.measure(model, recorder, step, True, arguments)
    torch.cuda.synchronize()  # a write past the cache's end fails here (device-side assert)
    # 12 rounds of 4 steps of each variant, each step a replay of each of its 2 graphs.
    assert {variant: len(rounds) for variant, rounds in times.items()} == {
        "off": 12, "moestat": 12, "moestat stopped": 12, "sglang-style": 12, "ids kept": 12,
        "off, recaptured": 12}
    assert write_positions(step) == {4 * 2}, "rewound before the last round's steps"
    assert hf_step_cost.check_recorded(recorder, BATCH, 4 * 2) == "ok"
