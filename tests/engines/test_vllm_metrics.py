"""moestat.vllm.metrics against vLLM 0.33.0's own EplbState on CPU (one-process gloo group):
loads recorded through EplbState.step (its load pass copied into its window ring), then
moestat's live metrics of the window equal a numpy computation of the same window, vLLM's own
balancedness (what step(log_stats=True) logs, and _compute_eplb_load_stats) equals moestat's
vLLM definition step by step, and the advice is moestat.advise_rebalance's on the window.

Skipped where vLLM's EPLB modules do not import (vllm_harness.py says when that is an error).
"""
import numpy as np
import pytest

import vllm_harness  # first: vLLM's modules, or a skip
from vllm_harness import (  # noqa: F401 - fixtures, used by name
    NUM_EXPERTS, NUM_LAYERS, NUM_PHYSICAL, restore_policies, vllm_gloo_world)

import torch
from vllm.distributed.eplb import eplb_state as vllm_eplb_state

import moestat
from moestat.vllm import metrics as vllm_metrics

NUM_RANKS = 3  # the stand-in model's 12 slots as if over 3 EP ranks of 4 (ep_size 1 here)


def skewed_pass(rng, step):
    """One step's tokens per physical slot [L, P]: expert 0 hot on layer 0, the hot expert of
    layer 1 changing with the step; some steps idle."""
    load = rng.integers(0, 6, (NUM_LAYERS, NUM_PHYSICAL))
    load[0, 0] += 50
    load[1, step % NUM_PHYSICAL] += 30 + 5 * step
    if step == 3:
        load[:] = 0  # an idle step: recorded by vLLM, left out by moestat
    return torch.from_numpy(load.astype(np.int32))


def sglang_balancedness(gpu_loads):
    """[L, R] -> SGLang's compute_utilization_rate: mean over layers of (mean+1e-5)/(max+1e-5)."""
    gpu_loads = gpu_loads.astype(np.float64)
    return float(((gpu_loads.mean(axis=1) + 1e-5) / (gpu_loads.max(axis=1) + 1e-5)).mean())


class ThreeRankGroup:
    """vLLM's EP device group as step() sees it, with 3 ranks: its balancedness logging splits
    the slots over 3 ranks; the all-reduce still runs on the real one-process gloo group."""

    def __init__(self, real):
        self.real = real

    def size(self):
        return NUM_RANKS

    def rank(self):
        return 0


def three_ranks(monkeypatch):
    real_coordinator = vllm_eplb_state.get_ep_group()
    real_group = real_coordinator.device_group
    real_all_reduce = vllm_eplb_state.all_reduce

    class Coordinator:
        device_group = ThreeRankGroup(real_group)
        world_size = real_coordinator.world_size
        rank_in_group = 0

    monkeypatch.setattr(vllm_eplb_state, "get_ep_group", Coordinator)
    monkeypatch.setattr(vllm_eplb_state, "all_reduce",
                        lambda tensor, group=None: real_all_reduce(tensor, group=real_group))


@pytest.fixture
def recorded(vllm_gloo_world, restore_policies, monkeypatch):
    """An EplbState that recorded 7 steps (window 4: the ring wrapped) with balancedness
    logging on every step; returns (state, model_state, passes, vLLM's logged values)."""
    vllm_harness.cpu_stand_ins(monkeypatch)
    monkeypatch.setattr(vllm_gloo_world.eplb_config, "log_balancedness_interval", 1)
    logged = []

    def capture(message, *args, **kwargs):
        if message.startswith("EPLB step"):
            logged.append(args)  # step, model, avg_tokens, max_tokens, balancedness, ...

    monkeypatch.setattr(vllm_eplb_state.logger, "info", capture)
    state, model, model_state = vllm_harness.new_eplb_state(vllm_gloo_world)
    state.step(is_profile=True)
    state.expert_rearrangement_step = 0  # no rearrange within these steps
    three_ranks(monkeypatch)
    rng = np.random.default_rng(26)
    passes = []
    for step in range(7):
        load = skewed_pass(rng, step)
        model_state.expert_load_pass.copy_(load)  # what the routers add up in a forward
        passes.append(load.numpy().astype(np.int64))
        state.step(log_stats=True)
    assert state.expert_load_window_size == 4 and state.expert_load_window_step == 3
    return state, model_state, passes, logged


def expected_of(passes, phy2log):
    """The window's steps with load, oldest first, computed independently: [n, L, R] GPU loads
    and [n, L, E] logical counts."""
    window = [p for p in passes[-4:] if p.any()]
    gpu = np.stack([p.reshape(NUM_LAYERS, NUM_RANKS, -1).sum(axis=2) for p in window])
    logical = np.zeros((len(window), NUM_LAYERS, NUM_EXPERTS), dtype=np.int64)
    for n, p in enumerate(window):
        for layer in range(NUM_LAYERS):
            for slot in range(NUM_PHYSICAL):
                logical[n, layer, phy2log[layer, slot]] += p[layer, slot]
    return np.stack(window), gpu, logical


def test_window_metrics_of_vllms_eplb_state(recorded):
    state, model_state, passes, logged = recorded
    phy2log = model_state.physical_to_logical_map.numpy()
    window, gpu, logical = expected_of(passes, phy2log)
    assert len(window) == 3  # steps 3..6, step 3 idle

    result = vllm_metrics.window_metrics(state, num_ranks=NUM_RANKS, num_hottest_experts=3)
    assert result.num_ranks == NUM_RANKS
    np.testing.assert_array_equal(result.physical_counts, window)
    np.testing.assert_array_equal(result.logical_counts, logical)
    np.testing.assert_array_equal(result.gpu_loads, gpu)
    # SGLang's definition (moestat's LiveMetrics), step by step and the means
    sglang = np.array([sglang_balancedness(g) for g in gpu])
    np.testing.assert_allclose(result.balancedness, sglang, rtol=1e-12)
    for n in (10, 100, 1000):
        assert result.balancedness_means[n] == pytest.approx(sglang[-n:].mean(), rel=1e-12)
    # vLLM's definition: numpy, vLLM's own function, and what vLLM logged for those steps
    vllm = np.array([g.mean(axis=1).sum() / g.max(axis=1).sum() for g in gpu])
    np.testing.assert_allclose(result.vllm_balancedness, vllm, rtol=1e-12)
    for n, g in enumerate(gpu):
        avg, peak = vllm_eplb_state._compute_eplb_load_stats(torch.from_numpy(g).float())
        assert result.vllm_balancedness[n] == pytest.approx(float(avg / peak), rel=1e-6)
    # what vLLM's step(log_stats=True) logged for each step, over its (3) EP ranks
    assert len(logged) == 7
    for args, p in zip(logged, passes):
        ours = moestat.balancedness_sum_ratio(p.reshape(NUM_LAYERS, NUM_RANKS, -1).sum(axis=2))
        assert float(ours) == pytest.approx(args[4], rel=1e-6)
    assert [args[4] for args in logged[-4:] if args[4]] == pytest.approx(list(vllm), rel=1e-6)
    assert logged[3][4] == 0.0  # the idle step
    for n in (10, 100, 1000):
        assert result.vllm_balancedness_means[n] == pytest.approx(vllm[-n:].mean(), rel=1e-12)
    # hottest experts: the window's logical totals
    totals = logical.sum(axis=0)
    top = sorted(((int(totals[l, e]), l, e) for l in range(NUM_LAYERS)
                  for e in range(NUM_EXPERTS)), key=lambda t: (-t[0], t[1], t[2]))[:3]
    got = [(h.assignments, h.layer, h.expert) for h in result.hottest_experts]
    assert [g[0] for g in got] == [t[0] for t in top]
    assert got[0] == top[0]
    # Prometheus text: moestat's names, and vLLM's definition added
    text = result.prometheus
    assert f"moestat_passes_observed_total {len(window)}" in text
    assert "moestat_pass_balancedness_ratio" in text
    assert f'moestat_vllm_balancedness_mean_ratio{{passes="10"}} {float(vllm.mean())!r}' in text
    assert 'moestat_pass_gpu_load_assignments{layer="0",gpu="2"}' in text
    # the same from load_window_tensors' dict (what a worker saves), and from the bare pair
    # (vLLM's ring order, so only the multiset of steps is the same)
    saved = moestat.vllm.load_window_tensors(state)
    again = vllm_metrics.window_metrics(saved, num_ranks=NUM_RANKS)
    np.testing.assert_array_equal(again.balancedness, result.balancedness)
    pair = vllm_metrics.window_metrics(
        (model_state.expert_load_window, model_state.physical_to_logical_map),
        num_ranks=NUM_RANKS)
    assert sorted(pair.vllm_balancedness) == pytest.approx(sorted(result.vllm_balancedness))


def test_advice_is_advise_rebalance_on_the_window_and_the_map_in_force(recorded):
    state, model_state, passes, _ = recorded
    phy2log = model_state.physical_to_logical_map.numpy()
    _, _, logical = expected_of(passes, phy2log)
    advice = vllm_metrics.advise(state, num_ranks=NUM_RANKS, seconds_per_balanced_pass=0.01,
                                 min_evaluation_passes=1, num_bootstrap=50)
    direct = moestat.advise_rebalance(
        moestat.Placement(phy2log.astype(np.int64), num_logical_experts=NUM_EXPERTS), logical,
        NUM_RANKS, seconds_per_balanced_pass=0.01,
        horizon_passes=state.expert_rearrangement_step_interval, min_evaluation_passes=1,
        num_bootstrap=50)
    assert advice["rebalance"] == direct["rebalance"]
    assert advice["reason"] == direct["reason"]
    assert advice["balancedness_now"] == direct["balancedness_now"]
    np.testing.assert_array_equal(advice["moves"], direct["moves"])
    if advice["rebalance"]:  # the plan it advises fits vLLM's map
        vllm_harness.assert_valid_for_vllm(
            torch.from_numpy(np.asarray(advice["placement"].physical_to_logical, dtype=np.int64)),
            NUM_LAYERS, NUM_PHYSICAL, NUM_EXPERTS)
    with pytest.raises(ValueError, match="horizon_passes"):
        vllm_metrics.advise((model_state.expert_load_window, model_state.physical_to_logical_map),
                            num_ranks=NUM_RANKS, seconds_per_balanced_pass=0.01)


def test_shapes_that_do_not_fit_are_refused():
    window = np.ones((2, NUM_LAYERS, NUM_PHYSICAL), dtype=np.int32)
    phy2log = vllm_harness.initial_map().expand(NUM_LAYERS, -1).numpy()
    with pytest.raises(ValueError, match="EP ranks"):
        vllm_metrics.window_metrics((window, phy2log))
    with pytest.raises(ValueError, match="do not divide"):
        vllm_metrics.window_metrics((window, phy2log), num_ranks=5)
    with pytest.raises(ValueError):
        vllm_metrics.window_metrics((window[:, :2], phy2log), num_ranks=NUM_RANKS)
