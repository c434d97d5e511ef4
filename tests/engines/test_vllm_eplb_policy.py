"""moestat.vllm's EPLB policy against vLLM 0.33.0's own code, on CPU: vLLM's default policy on
the same loads (real DeepSeek-V3 ones and random skewed ones), vLLM's plugin loader and policy
selection, and vLLM's EplbState in a one-process gloo group.

Skipped where vLLM's EPLB modules do not import (vllm_harness.py says when that is an error).
The stand-ins and fixtures it shares with test_vllm_offline.py are in vllm_harness.py.
"""
import json
import os
import pathlib
from typing import get_args

import numpy as np
import pytest

import vllm_harness  # first: vLLM's modules, or a skip
from vllm_harness import (  # noqa: F401 - fixtures, used by name
    NUM_EXPERTS, NUM_LAYERS, NUM_PHYSICAL, NUM_REDUNDANT, assert_valid_for_vllm,
    installed_entry_point, restore_policies, vllm_gloo_world)

import torch
from vllm.config.parallel import EPLBConfig, EPLBPolicyOption
from vllm.distributed.eplb import policy as eplb_policies
from vllm.distributed.eplb.policy.abstract import AbstractEplbPolicy
from vllm.distributed.eplb.policy.default import DefaultEplbPolicy

import moestat.vllm
from moestat.vllm import eplb_policy
from moestat.vllm.eplb_policy import MoestatEplbPolicy

ROOT = vllm_harness.ROOT
TOLERANCE = 1e-12


# vLLM's view of a placement: an expert's load split evenly over its replicas, physical slot p
# on rank p // (P / ranks); balancedness sum_l mean_r / sum_l max_r (eplb_state.py). Computed
# here with torch, independently of moestat.vllm's numpy version.
def vllm_rank_loads(weight, phy2log, num_ranks):
    weight = torch.as_tensor(weight).double()
    phy2log = torch.as_tensor(phy2log).long()
    counts = torch.zeros_like(weight).scatter_add_(1, phy2log, torch.ones_like(phy2log, dtype=weight.dtype))
    per_slot = torch.gather(weight / counts.clamp_min(1), 1, phy2log)
    return per_slot.reshape(weight.shape[0], num_ranks, -1).sum(-1)


def vllm_balancedness(weight, phy2log, num_ranks):
    loads = vllm_rank_loads(weight, phy2log, num_ranks)
    total_max = loads.max(1).values.sum().item()
    return loads.mean(1).sum().item() / total_max if total_max > 0 else 0.0


def assert_never_worse(weight, mine, reference, num_ranks):
    """moestat's map is at least as balanced as the reference's in every layer, so in total."""
    mine_max = vllm_rank_loads(weight, mine, num_ranks).max(1).values
    reference_max = vllm_rank_loads(weight, reference, num_ranks).max(1).values
    worse = mine_max > reference_max * (1 + TOLERANCE)
    assert not bool(worse.any()), f"worse than vLLM's default in layers {worse.nonzero().flatten().tolist()}"
    assert vllm_balancedness(weight, mine, num_ranks) >= \
        vllm_balancedness(weight, reference, num_ranks) - TOLERANCE


# --- vLLM's configuration and registry ------------------------------------------------------

def test_vllm_accepts_only_the_policy_name_default_so_moestat_replaces_it():
    assert get_args(EPLBPolicyOption) == ("default",)
    assert set(eplb_policies.EPLB_POLICIES) == {"default"}
    with pytest.raises(ValueError, match="default"):  # pydantic's ValidationError
        EPLBConfig(policy="moestat", use_async=False)
    # async EPLB, vLLM's default mode, requires the name "default" too
    assert EPLBConfig().use_async and EPLBConfig().policy == "default"


def test_policy_implements_vllms_interface():
    assert issubclass(MoestatEplbPolicy, AbstractEplbPolicy)
    assert not getattr(MoestatEplbPolicy, "__abstractmethods__", None)
    import inspect

    assert list(inspect.signature(MoestatEplbPolicy.rebalance_experts).parameters) == list(
        inspect.signature(DefaultEplbPolicy.rebalance_experts).parameters)


def test_register_replaces_default_and_is_idempotent(restore_policies, monkeypatch):
    monkeypatch.setenv(moestat.vllm.ENV_SWITCH, "1")
    assert restore_policies["default"] is DefaultEplbPolicy
    assert moestat.vllm.register() is MoestatEplbPolicy
    assert moestat.vllm.register() is MoestatEplbPolicy
    assert restore_policies["default"] is MoestatEplbPolicy
    assert set(restore_policies) == {"default"}  # vLLM's invariant: keys == the Literal's names
    assert MoestatEplbPolicy.reference_policy is DefaultEplbPolicy  # not itself
    assert moestat.vllm.MoestatEplbPolicy is MoestatEplbPolicy


def test_register_changes_nothing_unless_switched_on(restore_policies, monkeypatch):
    monkeypatch.delenv(moestat.vllm.ENV_LOAD_DIR, raising=False)
    monkeypatch.delenv(moestat.vllm.ENV_PLACEMENT, raising=False)
    for value in (None, "0", "off", ""):
        if value is None:
            monkeypatch.delenv(moestat.vllm.ENV_SWITCH, raising=False)
        else:
            monkeypatch.setenv(moestat.vllm.ENV_SWITCH, value)
        assert moestat.vllm.register() is None
        assert restore_policies["default"] is DefaultEplbPolicy


def test_vllms_plugin_loader_makes_vllms_selection_pick_moestat(restore_policies,
                                                                installed_entry_point):
    import vllm.plugins
    from vllm.distributed.eplb import eplb_state

    vllm.plugins.plugins_loaded = False
    vllm.plugins.load_general_plugins()
    # what EplbState.add_model does: EPLB_POLICIES[parallel_config.eplb_config.policy]
    assert eplb_state.EPLB_POLICIES is restore_policies
    assert eplb_state.EPLB_POLICIES[EPLBConfig(use_async=False).policy] is MoestatEplbPolicy
    assert eplb_state.EPLB_POLICIES[EPLBConfig().policy] is MoestatEplbPolicy


def test_vllms_allow_list_without_moestat_keeps_vllms_policy(restore_policies,
                                                             installed_entry_point, monkeypatch):
    import vllm.plugins

    monkeypatch.setenv("VLLM_PLUGINS", "someone_else")
    vllm.plugins.plugins_loaded = False
    vllm.plugins.load_general_plugins()
    assert restore_policies["default"] is DefaultEplbPolicy


# --- plans: never worse than vLLM's default, valid for vLLM ----------------------------------

CONFIGS = [  # (num_replicas, num_groups, num_nodes, num_ranks) for 256 experts
    (288, 8, 4, 32),  # hierarchical, DeepSeek-V3's 8 groups on 4 nodes
    (288, 1, 1, 32),  # global
    (256, 8, 4, 32),  # no redundant experts
    (288, 8, 3, 72),  # 8 groups on 3 nodes: vLLM plans globally
    (320, 8, 8, 64),
]


@pytest.fixture(scope="module")
def deepseek_loads(shared_dir_module):
    directory = shared_dir_module / "data" / "deepseek-v3-sglang-stats"
    files = sorted(directory.glob("*.json"))
    if not files:
        pytest.skip(f"no DeepSeek-V3 statistics under {directory}")
    # [61, 256] each; rows 0-2 (dense layers) all zero
    return {f.stem: torch.tensor(json.loads(f.read_text())["logical_count"], dtype=torch.int64)
            for f in files}


@pytest.fixture(scope="module")
def shared_dir_module():
    path = pathlib.Path(os.environ.get("MOESTAT_SHARED", ROOT.parent / "shared"))
    if not path.is_dir():
        pytest.skip(f"no shared data at {path}")
    return path


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c)))
def test_never_worse_than_vllms_default_on_real_loads(deepseek_loads, config):
    num_replicas, num_groups, num_nodes, num_ranks = config
    gains = []
    for name, weight in deepseek_loads.items():
        reference = DefaultEplbPolicy.rebalance_experts(weight, *config)
        mine = MoestatEplbPolicy.rebalance_experts(weight, *config)
        assert_valid_for_vllm(mine, weight.shape[0], num_replicas, weight.shape[1])
        assert_never_worse(weight, mine, reference, num_ranks)
        gains.append(vllm_balancedness(weight, mine, num_ranks)
                     - vllm_balancedness(weight, reference, num_ranks))
    # moestat's planner does better than vLLM's default on every real file (docs/placement.md)
    assert min(gains) > 0, gains


@pytest.mark.parametrize("config", CONFIGS[:3], ids=lambda c: "-".join(map(str, c)))
def test_replanning_from_the_map_in_force_on_real_loads(deepseek_loads, config):
    """Traffic changes file to file; each plan starts from the previous one, as vLLM calls it."""
    num_replicas, num_groups, num_nodes, num_ranks = config
    weights = list(deepseek_loads.values())
    old_default = old_mine = torch.tensor(  # vLLM's initial map: experts, then redundant ones
        [list(range(256)) + [i % 256 for i in range(num_replicas - 256)]] * weights[0].shape[0])
    mine_copies = default_copies = 0
    for weight in weights:
        reference = DefaultEplbPolicy.rebalance_experts(weight, *config, old_default)
        mine = MoestatEplbPolicy.rebalance_experts(weight, *config, old_mine)
        assert_valid_for_vllm(mine, weight.shape[0], num_replicas, weight.shape[1])
        assert_never_worse(weight, mine, reference, num_ranks)
        report = MoestatEplbPolicy.last_report
        assert report["balancedness"] >= report["balancedness_reference"] - TOLERANCE
        mine_copies += int(eplb_policy.remote_copies(old_mine, mine, num_ranks).sum())
        default_copies += int(eplb_policy.remote_copies(old_default, reference, num_ranks).sum())
        old_default, old_mine = reference, mine
    # aligned with the map in force, moestat's plans send fewer experts across ranks
    assert mine_copies < default_copies, (mine_copies, default_copies)


def random_config(rng):
    num_experts = int(rng.choice([4, 8, 16, 32, 64, 160, 256]))
    num_groups = int(rng.choice([g for g in (1, 2, 4, 8) if num_experts % g == 0]))
    num_nodes = int(rng.choice([1, 2, 4]))
    ranks_per_node = int(rng.choice([1, 2, 4, 8]))
    num_ranks = num_nodes * ranks_per_node
    slots = -(-num_experts // num_ranks) + int(rng.integers(0, 3))
    return num_experts, (slots * num_ranks, num_groups, num_nodes, num_ranks)


def random_loads(rng, num_layers, num_experts):
    kind = rng.integers(0, 4)
    if kind == 0:  # Zipf-like popularity, a random permutation per layer
        popularity = 1.0 / np.arange(1, num_experts + 1) ** rng.uniform(0.5, 2.0)
        loads = np.stack([rng.permutation(popularity) for _ in range(num_layers)])
        loads = np.round(loads * rng.uniform(10, 1e6)).astype(np.int64)
    elif kind == 1:  # lognormal
        loads = np.round(rng.lognormal(0, rng.uniform(0.5, 2.5), (num_layers, num_experts)) * 100)
    elif kind == 2:  # small integers: ties everywhere
        loads = rng.integers(0, 4, (num_layers, num_experts))
    else:  # one or two hot experts
        loads = rng.integers(1, 10, (num_layers, num_experts))
        loads[:, rng.integers(0, num_experts, 2)] *= 1000
    loads = np.asarray(loads, dtype=np.int64)
    loads[rng.random(num_layers) < 0.15] = 0  # some layers without load
    return torch.from_numpy(loads)


def random_valid_map(rng, num_layers, num_replicas, num_experts):
    rows = []
    for _ in range(num_layers):
        row = np.concatenate([np.arange(num_experts), rng.integers(0, num_experts, num_replicas - num_experts)])
        rows.append(rng.permutation(row))
    return torch.from_numpy(np.stack(rows).astype(np.int64))


def test_never_worse_than_vllms_default_on_random_skewed_loads():
    rng = np.random.default_rng(2026)
    strictly_better = 0
    for case in range(60):
        num_experts, config = random_config(rng)
        num_replicas, _, _, num_ranks = config
        num_layers = int(rng.integers(1, 6))
        weight = random_loads(rng, num_layers, num_experts)
        old = random_valid_map(rng, num_layers, num_replicas, num_experts) if case % 2 else None
        reference = DefaultEplbPolicy.rebalance_experts(weight, *config, old)
        mine = MoestatEplbPolicy.rebalance_experts(weight, *config, old)
        assert_valid_for_vllm(mine, num_layers, num_replicas, num_experts)
        assert_never_worse(weight, mine, reference, num_ranks)
        if old is not None:
            # a kept layer is the old one; any other layer a permutation of a plan's slots
            chosen = MoestatEplbPolicy.last_report["chosen"]
            for layer, how in enumerate(chosen):
                if how == "kept":
                    assert torch.equal(mine[layer], old[layer])
        strictly_better += vllm_balancedness(weight, mine, num_ranks) > \
            vllm_balancedness(weight, reference, num_ranks) + 1e-9
    assert strictly_better >= 10, strictly_better


def test_a_better_reference_plan_wins_where_moestat_is_not_optimal(restore_policies, monkeypatch):
    """moestat's planner is not optimal: loads [24, 3, 6, 7, 6] on 8 slots of 2 ranks, where it
    gives expert 0 three replicas and reaches 24 on its heaviest rank, and the optimum (found by
    enumerating every map) is 23. A policy displaced by register() that finds the optimum is
    the reference, and wins."""
    optimum = torch.tensor([[0, 0, 3, 3, 0, 1, 2, 4]])

    class Oracle(AbstractEplbPolicy):
        @classmethod
        def rebalance_experts(cls, weight, num_replicas, num_groups, num_nodes, num_ranks,
                              old_global_expert_indices=None):
            return optimum.clone()

    monkeypatch.setenv(moestat.vllm.ENV_SWITCH, "1")
    restore_policies["default"] = Oracle
    moestat.vllm.register()
    assert MoestatEplbPolicy.reference_policy is Oracle
    weight = torch.tensor([[24, 3, 6, 7, 6]])
    from moestat import plan_moestat

    alone = plan_moestat(weight.double().numpy(), 8, 1, 1, 2).physical_to_logical
    assert vllm_rank_loads(weight, torch.from_numpy(alone.astype(np.int64)), 2).max() == 24
    mine = restore_policies["default"].rebalance_experts(weight, 8, 1, 1, 2)
    assert_valid_for_vllm(mine, 1, 8, 5)
    assert vllm_rank_loads(weight, mine, 2).max() == 23
    assert MoestatEplbPolicy.last_report["chosen"] == ["reference"]


def test_all_zero_load_at_profile_time():
    # vLLM's profile run rearranges with an all-zero window
    num_layers, num_experts, config = 3, 16, (24, 4, 2, 8)
    zero = torch.zeros(num_layers, num_experts, dtype=torch.int64)
    fresh = MoestatEplbPolicy.rebalance_experts(zero, *config)
    assert_valid_for_vllm(fresh, num_layers, 24, num_experts)
    initial = torch.tensor([list(range(16)) + list(range(8))] * num_layers)
    kept = MoestatEplbPolicy.rebalance_experts(zero, *config, initial)
    assert torch.equal(kept, initial)  # nothing to gain: nothing moves
    assert MoestatEplbPolicy.last_report["chosen"] == ["kept"] * num_layers


def test_a_map_in_force_that_vllm_could_not_use_is_ignored():
    # elastic EP pads new slots with -1 and may change the slot count
    rng = np.random.default_rng(7)
    weight = random_loads(rng, 2, 16).clamp_min(1)
    config = (32, 1, 1, 4)
    padded = random_valid_map(rng, 2, 32, 16)
    padded[:, -4:] = -1
    for old in (padded, random_valid_map(rng, 2, 24, 16), torch.zeros(2, 32, dtype=torch.int64)):
        mine = MoestatEplbPolicy.rebalance_experts(weight, *config, old)
        assert_valid_for_vllm(mine, 2, 32, 16)
        assert_never_worse(weight, mine, DefaultEplbPolicy.rebalance_experts(weight, *config), 4)
        assert MoestatEplbPolicy.last_report["balancedness_kept"] is None


def test_alignment_keeps_the_loads_and_moves_less():
    """Renumbering nodes, ranks within nodes and slots within ranks changes no rank's load."""
    rng = np.random.default_rng(11)
    num_experts, config = 64, (96, 8, 4, 16)
    weight = random_loads(rng, 4, num_experts).clamp_min(1)
    old = DefaultEplbPolicy.rebalance_experts(random_loads(rng, 4, num_experts), *config)
    new = DefaultEplbPolicy.rebalance_experts(weight, *config).numpy()
    aligned = eplb_policy.align_to(new, old.numpy(), 16, 4, num_experts)
    before = np.sort(vllm_rank_loads(weight, new, 16).numpy(), axis=1)
    after = np.sort(vllm_rank_loads(weight, aligned, 16).numpy(), axis=1)
    np.testing.assert_allclose(after, before, rtol=1e-12)
    # each node of the aligned map holds the experts of one node of the plan (groups stay put)
    for layer in range(4):
        nodes_new = {frozenset(new[layer].reshape(4, -1)[n]) for n in range(4)}
        nodes_aligned = {frozenset(aligned[layer].reshape(4, -1)[n]) for n in range(4)}
        assert nodes_new == nodes_aligned
    assert eplb_policy.remote_copies(old, aligned, 16).sum() <= eplb_policy.remote_copies(old, new, 16).sum()
    # the map in force with its nodes, ranks and slots shuffled is recognised: nothing moves
    shuffled = old.numpy().reshape(4, 4, 4, 6)[:, rng.permutation(4)][:, :, rng.permutation(4)]
    shuffled = shuffled[..., rng.permutation(6)].reshape(4, 96)
    assert not np.array_equal(shuffled, old.numpy())
    assert np.array_equal(eplb_policy.align_to(shuffled, old.numpy(), 16, 4, num_experts), old.numpy())


# --- vLLM's EplbState on CPU, one process, gloo -----------------------------------------------

def test_eplb_state_plans_with_moestat_and_moves_the_weights(vllm_gloo_world, restore_policies,
                                                             installed_entry_point, monkeypatch):
    import vllm.plugins
    from vllm.distributed.eplb import eplb_state as eplb_state_module

    vllm_harness.cpu_stand_ins(monkeypatch)
    vllm.plugins.plugins_loaded = False
    vllm.plugins.load_general_plugins()  # the worker does this before building the model

    calls = []  # what vLLM hands the policy
    real_plan = eplb_policy.plan

    def spy(*args, **kwargs):
        calls.append((args[0].clone(), args[1:5], None if args[5] is None else args[5].clone()))
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(eplb_policy, "plan", spy)

    state = eplb_state_module.EplbState(vllm_gloo_world, torch.device("cpu"))
    initial = torch.tensor(eplb_state_module.EplbState.build_initial_global_physical_to_logical_map(
        NUM_EXPERTS, NUM_REDUNDANT))
    model = vllm_harness.MoeModel(initial)
    state.add_model(model, vllm_harness.MoeModelConfig())
    assert state.policy is MoestatEplbPolicy  # vLLM's own selection
    model_state = state.model_states["moestat-test-moe"]

    # profile run: all-zero load, nothing to gain, nothing moves
    state.step(is_profile=True)
    assert len(calls) == 1
    weight, arguments, old = calls[0]
    assert arguments == (NUM_PHYSICAL, 1, 1, 1) and not bool(weight.any())
    assert torch.equal(old, initial.expand(NUM_LAYERS, -1))
    assert torch.equal(model_state.physical_to_logical_map, initial.expand(NUM_LAYERS, -1))

    # one rank balances whatever the map; let the policy replan anyway so that weights move
    MoestatEplbPolicy.keep_current = False
    load = torch.tensor([[50, 1, 1, 1, 30, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 90],
                         [5, 5, 5, 5, 5, 5, 5, 5]], dtype=torch.int32)
    steps = 0
    while len(calls) == 1:
        # the router adds a pass's tokens at physical ids (each expert's first replica here)
        model_state.expert_load_pass.zero_()
        first_slot = model_state.logical_to_physical_map[:, :, 0]
        model_state.expert_load_pass.scatter_add_(1, first_slot, load)
        state.step()
        steps += 1
        assert steps <= vllm_gloo_world.eplb_config.step_interval
    weight, arguments, old = calls[1]
    window = min(steps, vllm_gloo_world.eplb_config.window_size)
    assert torch.equal(weight, load.long() * window)  # the window, in logical experts
    assert arguments == (NUM_PHYSICAL, 1, 1, 1)
    new = model_state.physical_to_logical_map
    assert_valid_for_vllm(new.clone(), NUM_LAYERS, NUM_PHYSICAL, NUM_EXPERTS)
    assert not torch.equal(new, old)  # moestat's plan, committed
    replicas = torch.zeros(NUM_LAYERS, NUM_EXPERTS, dtype=torch.int64).scatter_add_(
        1, new, torch.ones_like(new))
    assert torch.equal(model_state.logical_replica_count, replicas)
    assert int(replicas[0, 0]) > 1 and int(replicas[1, 7]) > 1  # the hot experts got replicas
    for layer in range(NUM_LAYERS):  # vLLM moved every slot's weights to the slot's expert
        assert torch.equal(model.moe_layers[layer].weight[:, 0], new[layer].double() * 100 + layer)
        for expert in range(NUM_EXPERTS):
            slots = model_state.logical_to_physical_map[layer, expert]
            slots = slots[slots >= 0]
            assert len(slots) == int(replicas[layer, expert])
            assert bool((new[layer, slots] == expert).all())
