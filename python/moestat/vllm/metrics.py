"""moestat's live metrics and rebalance advice from vLLM's EPLB load window.

vLLM 0.33.0's ``EplbState`` keeps, per model, ``expert_load_window [W, L, P]``: the tokens each
physical expert slot of each MoE layer received in each of the last W recorded steps (one rank's
tokens), a ring written at ``expert_load_window_step``. ``window_metrics`` feeds those steps, oldest
first, to a moestat ``CpuRecorder`` (``record_local_counts``: each step's slot counts, exactly as
vLLM counted them) under the map in force, and reads them with moestat's ``LiveMetrics``: per-step
GPU balancedness (SGLang's definition, moestat's), its means over the last 10, 100 and 1000 steps,
the hottest logical experts and the Prometheus text of ``docs/metrics.md``. It adds vLLM's own
definition (``sum_l mean_r / sum_l max_r`` of the GPU loads, what ``EplbState.step(log_stats=True)``
logs) per step and its means. ``advise`` asks ``moestat.advise_rebalance`` whether rebalancing the
map in force now pays for the weights it moves, on the window's logical counts.

Steps without load (ring rows not written yet, idle or dummy steps) are left out. The window is not
cleared at a rearrange, so after one its older steps were recorded under the previous map: their GPU
loads (balancedness) are still theirs, but their logical counts (hottest experts, advice) are read
through the map in force now, as ``EplbState.rearrange`` reads them.
"""

from dataclasses import dataclass, field

import numpy as np

from .. import _core
from .offline import int64_array, eplb_model_state, window_source, load_window_counts

MEAN_WINDOWS = (10, 100, 1000)


@dataclass
class WindowMetrics:
    """What ``window_metrics`` computed from one window (n: its steps with load, oldest first)."""

    num_ranks: int
    physical_counts: np.ndarray      # [n, L, P] int64: vLLM's window rows with load
    logical_counts: np.ndarray       # [n, L, E] int64: the same through the map in force
    gpu_loads: np.ndarray            # [n, L, R] int64: each EP rank's tokens per step and layer
    balancedness: np.ndarray         # [n] SGLang's per-step balancedness (moestat's LiveMetrics)
    vllm_balancedness: np.ndarray    # [n] vLLM's: sum_l mean_r / sum_l max_r (0 without load)
    balancedness_means: dict         # {10: value, 100: ..., 1000: ...}: SGLang's, last N steps
    vllm_balancedness_means: dict    # the same for vLLM's definition
    hottest_experts: list            # moestat.HotExpert (layer, expert, assignments)
    values: object                   # moestat.MetricValues after the last step
    prometheus: str = field(repr=False, default="")  # moestat's exposition + the vLLM gauges


def _num_ranks(source, model, num_ranks):
    if num_ranks is not None:
        return int(num_ranks)
    if hasattr(source, "model_states"):
        source = eplb_model_state(source, model)
    moe_model = getattr(source, "model", None)
    if moe_model is not None and getattr(moe_model, "num_local_physical_experts", 0):
        return int(moe_model.num_physical_experts) // int(moe_model.num_local_physical_experts)
    if isinstance(source, dict) and source.get("num_ranks"):
        return int(source["num_ranks"])
    raise ValueError("the number of EP ranks is not in this source: pass num_ranks=")


def _loaded_window(source, model, num_ranks, num_logical_experts):
    """(physical [n, L, P], logical [n, L, E], map [L, P], ranks): the window's steps with load,
    oldest first."""
    window, phy2log, oldest, experts = window_source(source, model)
    window, phy2log = int64_array(window), int64_array(phy2log)
    # load_window_counts checks the shapes and the map and maps slots to logical experts
    logical = load_window_counts((window, phy2log), num_logical_experts=(
        experts if num_logical_experts is None else num_logical_experts))
    if oldest is not None and len(window):
        shift = -int(oldest) % len(window)
        window, logical = np.roll(window, shift, axis=0), np.roll(logical, shift, axis=0)
    ranks = _num_ranks(source, model, num_ranks)
    if ranks <= 0 or window.shape[2] % ranks:
        raise ValueError(f"{window.shape[2]} physical slots do not divide over {ranks} EP ranks")
    if (phy2log < 0).any():
        raise ValueError("the map has slots without an expert (-1, elastic EP): not supported")
    loaded = window.reshape(len(window), -1).any(axis=1)
    return window[loaded], logical[loaded], phy2log, ranks


def _means(values):
    return {n: float(values[-n:].mean()) if len(values) else float("nan") for n in MEAN_WINDOWS}


def window_metrics(source, model=None, *, num_ranks=None, num_logical_experts=None,
                   num_hottest_experts=10, layer_names=()):
    """moestat's live metrics of vLLM's load window (``WindowMetrics``).

    source: what ``load_window_counts`` takes (an ``EplbState``, with model= when it has several;
    an ``EplbModelState``; ``load_window_tensors``' dict or its file; or the pair
    (``expert_load_window``, ``physical_to_logical_map``)). num_ranks: the EP ranks the slots
    divide over (an EplbState's model knows it). One rank's window has that rank's tokens; the
    deployment's is the sum over the ranks' windows (what rearrange all-reduces)."""
    physical, logical, phy2log, ranks = _loaded_window(source, model, num_ranks,
                                                       num_logical_experts)
    steps, layers, slots = physical.shape
    experts = logical.shape[2]
    topology = _core.ModelTopology(layers, experts, 1, num_physical_experts=slots)
    recorder = _core.CpuRecorder(topology, window_size=max(steps, 1))
    recorder.set_placement(_core.Placement(phy2log, num_logical_experts=experts, version=1))
    recorder.start()
    metrics = _core.LiveMetrics(recorder, num_gpus=ranks, num_hottest_experts=num_hottest_experts,
                                layer_names=list(layer_names))
    balancedness = np.zeros(steps)
    gpu_loads = np.zeros((steps, layers, ranks), dtype=np.int64)
    values = metrics.update()
    for step in range(steps):
        recorder.begin_pass(step)
        for layer in range(layers):
            recorder.record_local_counts(layer, physical[step, layer], 0)
        recorder.end_pass()
        values = metrics.update()
        balancedness[step] = values.last_pass_balancedness
        gpu_loads[step] = values.last_pass_gpu_loads
    # vLLM's _compute_eplb_load_stats: sum over layers of the mean rank load over the max's
    vllm_values = np.asarray(_core.balancedness_sum_ratio(gpu_loads), dtype=np.float64)
    vllm_means = _means(vllm_values)
    text = _core.prometheus_text(values)
    if steps:
        text += (
            "# HELP moestat_vllm_pass_balancedness_ratio vLLM's balancedness (sum over layers of "
            "the mean GPU load / of the max) of the latest step of its EPLB window\n"
            "# TYPE moestat_vllm_pass_balancedness_ratio gauge\n"
            f"moestat_vllm_pass_balancedness_ratio {float(vllm_values[-1])!r}\n"
            "# HELP moestat_vllm_balancedness_mean_ratio mean of vLLM's balancedness over the "
            "latest steps of its EPLB window\n"
            "# TYPE moestat_vllm_balancedness_mean_ratio gauge\n"
            + "".join(f'moestat_vllm_balancedness_mean_ratio{{passes="{n}"}} {value!r}\n'
                      for n, value in vllm_means.items()))
    return WindowMetrics(
        num_ranks=ranks, physical_counts=physical, logical_counts=logical, gpu_loads=gpu_loads,
        balancedness=balancedness, vllm_balancedness=vllm_values,
        balancedness_means={mean.window: mean.value for mean in values.balancedness_means},
        vllm_balancedness_means=vllm_means, hottest_experts=list(values.hottest_experts),
        values=values, prometheus=text)


def advise(source, model=None, *, seconds_per_balanced_pass, horizon_passes=None,
           num_ranks=None, num_groups=None, num_nodes=1, num_logical_experts=None, **options):
    """``moestat.advise_rebalance`` on vLLM's window: should vLLM rebalance the map in force now,
    and what would it gain (seconds over horizon_passes, net of the move's cost; see
    docs/placement.md). horizon_passes: the steps the new map would serve (default: an
    EplbState's step_interval, the steps to its next rearrange). num_groups: the model's expert
    groups (an EplbState's model knows it). Other options are advise_rebalance's. Returns its dict
    (rebalance, reason, balancedness_now, best, placement, moves, candidates, ...)."""
    physical, logical, phy2log, ranks = _loaded_window(source, model, num_ranks,
                                                       num_logical_experts)
    state = source if hasattr(source, "model_states") else None
    if horizon_passes is None:
        if state is None:
            raise ValueError("pass horizon_passes= (the steps the new map would serve)")
        horizon_passes = int(state.expert_rearrangement_step_interval)
    if num_groups is None:
        moe_model = getattr(eplb_model_state(state, model) if state is not None else source,
                            "model", None)
        num_groups = int(getattr(moe_model, "num_expert_groups", 1) or 1)
    placement = _core.Placement(phy2log, num_logical_experts=logical.shape[2])
    return _core.advise_rebalance(
        placement, logical, ranks, seconds_per_balanced_pass=seconds_per_balanced_pass,
        horizon_passes=int(horizon_passes), num_groups=num_groups, num_nodes=num_nodes, **options)


__all__ = ["WindowMetrics", "window_metrics", "advise", "MEAN_WINDOWS"]
