"""vLLM 0.33.0 offline, against vLLM's own EplbState on CPU (one-process gloo group): record
vLLM's load windows into moestat files (MOESTAT_VLLM_EPLB_LOAD_DIR), plan them with moestat,
and start a new EplbState that serves the placement (MOESTAT_VLLM_EPLB_PLACEMENT); files that
do not fit are logged and ignored; moestat.vllm.load_window_counts reads vLLM's window tensors.

Skipped where vLLM's EPLB modules do not import (vllm_harness.py says when that is an error).
"""
import errno
import json
import logging
import os
import pathlib
import subprocess

import numpy as np
import pytest

import vllm_harness  # first: vLLM's modules, or a skip
from vllm_harness import (  # noqa: F401 - fixtures, used by name
    NUM_EXPERTS, NUM_LAYERS, NUM_PHYSICAL, assert_valid_for_vllm, installed_entry_point,
    restore_policies, vllm_gloo_world)

import torch
from vllm.distributed.eplb.policy.default import DefaultEplbPolicy

import moestat
import moestat.vllm
from moestat.vllm import offline
from moestat.vllm.eplb_policy import MoestatEplbPolicy

# The CLI next to the package in the build tree (build/moestat beside build/python).
BUILD_TREE_CLI = pathlib.Path(moestat.__file__).parents[2] / "moestat"


@pytest.fixture(autouse=True)
def no_faults_yet(monkeypatch):
    """Every test starts with no fault counted and no window number taken."""
    monkeypatch.setattr(offline, "_faults", offline.Faults(
        offline.logger, "moestat.vllm.offline.faults()", logging.WARNING))
    monkeypatch.setattr(offline, "_next_number", {})


def load_plugins():
    """What every vLLM worker does before building the model."""
    import vllm.plugins

    vllm.plugins.plugins_loaded = False
    vllm.plugins.load_general_plugins()


def logical(physical_load, phy2log):
    """[L, E] int64: each slot's load added to its expert, slot by slot (independent of
    moestat.vllm and of vLLM)."""
    physical_load = np.asarray(physical_load)
    phy2log = np.asarray(phy2log)
    out = np.zeros((NUM_LAYERS, NUM_EXPERTS), dtype=np.int64)
    for layer in range(NUM_LAYERS):
        for slot in range(NUM_PHYSICAL):
            if phy2log[layer, slot] >= 0:
                out[layer, phy2log[layer, slot]] += int(physical_load[layer, slot])
    return out


def skewed_pass(rng):
    """One forward pass's tokens per physical slot [L, P]: hot experts 0 (layer 0) and 7
    (layer 1) with their redundant slots loaded too."""
    load = rng.integers(0, 5, (NUM_LAYERS, NUM_PHYSICAL))
    load[0, 0] += 60
    load[0, 8] += 40  # slot 8 holds expert 0 in vLLM's initial map
    load[1, 7] += 90
    return torch.from_numpy(load.astype(np.int32))


def step_until_rearrange(state, model_state, passes):
    """Records passes (in turn) and steps the state until it rearranges; returns the passes
    recorded and the map in force while they were recorded."""
    before = model_state.physical_to_logical_map.clone()
    recorded = []
    for step in range(state.expert_rearrangement_step_interval + 1):
        load = passes[step % len(passes)]
        model_state.expert_load_pass.copy_(load)
        recorded.append(load)
        state.step()
        if state.expert_rearrangement_step == 0:
            return recorded, before
    raise AssertionError("no rearrange within step_interval steps")


def test_record_plan_and_serve_a_placement_through_vllms_eplb_state(
        vllm_gloo_world, restore_policies, installed_entry_point, monkeypatch, tmp_path, caplog):
    vllm_harness.cpu_stand_ins(monkeypatch)
    loads = tmp_path / "loads"
    monkeypatch.setenv(moestat.vllm.ENV_LOAD_DIR, str(loads))
    load_plugins()

    # 1. Record: vLLM's EplbState hands moestat's policy its window at a rearrange.
    state, model, model_state = vllm_harness.new_eplb_state(vllm_gloo_world)
    assert state.policy is MoestatEplbPolicy
    state.step(is_profile=True)  # all-zero window: nothing written
    assert not loads.exists() or not list(loads.iterdir())
    rng = np.random.default_rng(26)
    passes = [skewed_pass(rng) for _ in range(3)]
    recorded, in_force = step_until_rearrange(state, model_state, passes)
    window = min(len(recorded), vllm_gloo_world.eplb_config.window_size)
    expected = sum(logical(load, in_force) for load in recorded[-window:])

    dumps = sorted(loads.glob("vllm-eplb-load-*"))
    assert [d.name for d in dumps] == [f"vllm-eplb-load-000001-{NUM_LAYERS}x{NUM_EXPERTS}.json"]
    read = moestat.read_counts(dumps[0])
    assert not read["has_window_axis"]
    np.testing.assert_array_equal(read["counts"], expected)
    metadata = json.loads(dumps[0].read_text())["vllm_eplb"]
    assert (metadata["num_replicas"], metadata["num_groups"], metadata["num_nodes"],
            metadata["num_ranks"]) == (NUM_PHYSICAL, 1, 1, 1)
    assert metadata["layers"].startswith("MoE layers only")
    # the window itself, read from vLLM's tensors with the map it was recorded under
    window_counts = moestat.vllm.load_window_counts((model_state.expert_load_window, in_force))
    np.testing.assert_array_equal(window_counts.sum(axis=0), expected)

    # 2. Plan offline with moestat, on the parameters vLLM planned with.
    placement = tmp_path / "placement.json"
    if BUILD_TREE_CLI.is_file():
        inspect = subprocess.run([str(BUILD_TREE_CLI), "inspect", str(dumps[0])],
                                 capture_output=True, text=True, check=True)
        assert f"{NUM_LAYERS} layers x {NUM_EXPERTS} experts" in inspect.stdout
        subprocess.run([str(BUILD_TREE_CLI), "plan", "--stats", str(dumps[0]),
                        "--replicas", str(metadata["num_replicas"]),
                        "--groups", str(metadata["num_groups"]),
                        "--nodes", str(metadata["num_nodes"]), "--gpus", str(metadata["num_ranks"]),
                        "--out", str(placement)], capture_output=True, text=True, check=True)
    else:
        moestat.write_placement(placement, moestat.plan_moestat(
            read["counts"].astype(np.float64), metadata["num_replicas"], metadata["num_groups"],
            metadata["num_nodes"], metadata["num_ranks"]))
    planned = torch.from_numpy(
        moestat.read_placement(placement).physical_to_logical.astype(np.int64))
    initial = vllm_harness.initial_map().expand(NUM_LAYERS, -1)
    assert not torch.equal(planned, initial)
    assert_valid_for_vllm(planned, NUM_LAYERS, NUM_PHYSICAL, NUM_EXPERTS)

    # 3. A new vLLM (a new EplbState, vLLM's initial map) with the placement.
    monkeypatch.setenv(moestat.vllm.ENV_PLACEMENT, str(placement))
    load_plugins()
    state, model, model_state = vllm_harness.new_eplb_state(vllm_gloo_world)
    assert torch.equal(model_state.physical_to_logical_map, initial)
    state.step(is_profile=True)
    # the policy returned the file's map at the profile run, and vLLM did not apply it
    assert MoestatEplbPolicy.last_report["source"] == "placement file"
    assert torch.equal(model_state.physical_to_logical_map, initial)
    vllm_harness.assert_weights_follow_the_map(model, model_state)
    # its first real rearrange moves the weights to the file's map
    step_until_rearrange(state, model_state, [skewed_pass(rng)])
    assert torch.equal(model_state.physical_to_logical_map, planned)
    vllm_harness.assert_weights_follow_the_map(model, model_state)
    replicas = torch.zeros(NUM_LAYERS, NUM_EXPERTS, dtype=torch.int64).scatter_add_(
        1, planned, torch.ones_like(planned))
    assert torch.equal(model_state.logical_replica_count, replicas)
    # and keeps it at the next one, whatever the load
    step_until_rearrange(state, model_state, [skewed_pass(rng).flip(1)])
    assert torch.equal(model_state.physical_to_logical_map, planned)
    vllm_harness.assert_weights_follow_the_map(model, model_state)
    # the windows of the second vLLM were written next to the first one's, none overwritten
    names = sorted(d.name for d in loads.glob("vllm-eplb-load-*"))
    assert names == [f"vllm-eplb-load-00000{i}-{NUM_LAYERS}x{NUM_EXPERTS}.json" for i in (1, 2, 3)]
    assert not list(loads.glob(".*"))  # no temporary file left
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "moestat" in r.name]


def _write(path, kind):
    """A placement file that vLLM's [3, 12] map of 8 experts cannot use."""
    good = np.tile(np.arange(NUM_PHYSICAL) % NUM_EXPERTS, (NUM_LAYERS, 1))
    if kind == "garbage":
        path.write_bytes(b"\x00\xffnot a placement")
    elif kind == "counts":
        moestat.write_logical_counts(path, np.ones((NUM_LAYERS, NUM_EXPERTS), dtype=np.int64))
    elif kind == "more slots":
        path.write_text(json.dumps({"physical_to_logical_map": np.tile(
            np.arange(NUM_PHYSICAL + 4) % NUM_EXPERTS, (NUM_LAYERS, 1)).tolist()}))
    elif kind == "all decoder layers":
        path.write_text(json.dumps({"physical_to_logical_map": np.tile(
            good[:1], (NUM_LAYERS + 2, 1)).tolist()}))
    elif kind == "another model's experts":  # a valid placement of 12 experts
        path.write_text(json.dumps({"physical_to_logical_map": np.tile(
            np.arange(NUM_PHYSICAL), (NUM_LAYERS, 1)).tolist()}))
    elif kind == "expert without replica":
        bad = good.copy()
        bad[1, bad[1] == 5] = 0
        path.write_text(json.dumps({"physical_to_logical_map": bad.tolist()}))
    elif kind == "id out of range":
        bad = good.copy()
        bad[2, 9] = NUM_EXPERTS
        path.write_text(json.dumps({"physical_to_logical_map": bad.tolist()}))
    elif kind == "negative id":
        bad = good.copy()
        bad[0, 11] = -1
        path.write_text(json.dumps({"physical_to_logical_map": bad.tolist()}))
    elif kind == "a directory":
        path.mkdir()
    elif kind == "absent":
        pass
    return path


@pytest.mark.parametrize("kind", ["garbage", "counts", "more slots", "all decoder layers",
                                  "another model's experts", "expert without replica",
                                  "id out of range", "negative id", "a directory", "absent"])
def test_a_placement_file_that_does_not_fit_is_logged_once_and_ignored(
        vllm_gloo_world, restore_policies, installed_entry_point, monkeypatch, tmp_path, caplog,
        kind):
    vllm_harness.cpu_stand_ins(monkeypatch)
    path = _write(tmp_path / "placement.json", kind)
    monkeypatch.setenv(moestat.vllm.ENV_PLACEMENT, str(path))
    load_plugins()
    state, model, model_state = vllm_harness.new_eplb_state(vllm_gloo_world)
    MoestatEplbPolicy.keep_current = False  # one rank: replan anyway, so that something moves
    with caplog.at_level(logging.INFO, logger="moestat"):
        state.step(is_profile=True)
        step_until_rearrange(state, model_state, [skewed_pass(np.random.default_rng(1))])
    # vLLM went on, with moestat's own plan
    assert MoestatEplbPolicy.last_report["source"] == "moestat"
    assert not torch.equal(model_state.physical_to_logical_map, vllm_harness.initial_map().expand(
        NUM_LAYERS, -1))
    assert_valid_for_vllm(model_state.physical_to_logical_map.clone(), NUM_LAYERS, NUM_PHYSICAL,
                          NUM_EXPERTS)
    vllm_harness.assert_weights_follow_the_map(model, model_state)
    warnings = [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING and r.name.startswith("moestat")]
    assert len(warnings) == 1, warnings  # two calls (profile run, rearrange), one warning
    assert str(path) in warnings[0] and "plans as usual" in warnings[0]
    assert offline.faults() == {"placement": 2}  # both counted


def test_a_placement_of_another_shape_is_refused_at_its_first_row(monkeypatch, tmp_path, caplog):
    # A map of 20000 slots a row: the reader stops at vLLM's 13th slot, before the text that
    # follows (cut short here: not JSON), so a large file of another model costs no time.
    path = tmp_path / "placement.json"
    row = ", ".join(["0"] * 20000)
    path.write_text('{"physical_to_logical_map": [[' + row + "], [" + row)
    monkeypatch.setenv(offline.ENV_PLACEMENT, str(path))
    with caplog.at_level(logging.WARNING, logger="moestat"):
        for _ in range(3):
            assert offline.static_placement(NUM_LAYERS, NUM_PHYSICAL, NUM_EXPERTS) is None
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("moestat")]
    assert len(warnings) == 1, warnings
    assert (f"physical_to_logical_map[0] has more than {NUM_PHYSICAL} entries, expected "
            f"{NUM_PHYSICAL} (physical slots)") in warnings[0]
    assert offline.faults() == {"placement": 3}


def test_offline_variables_alone_keep_vllms_own_plans(restore_policies, monkeypatch, tmp_path):
    from vllm.distributed.eplb import policy as eplb_policies

    monkeypatch.delenv(moestat.vllm.ENV_SWITCH, raising=False)
    monkeypatch.delenv(moestat.vllm.ENV_PLACEMENT, raising=False)
    monkeypatch.setenv(moestat.vllm.ENV_LOAD_DIR, str(tmp_path))
    assert moestat.vllm.register() is MoestatEplbPolicy
    policy = eplb_policies.EPLB_POLICIES["default"]
    assert policy is MoestatEplbPolicy and not policy.plan_with_moestat
    weight = torch.tensor([[50, 1, 1, 1, 30, 1, 1, 1]] * 2)
    old = vllm_harness.initial_map().expand(2, -1)
    for args in ((12, 1, 1, 1), (12, 2, 1, 2), (12, 1, 1, 4)):
        assert torch.equal(policy.rebalance_experts(weight, *args, old),
                           DefaultEplbPolicy.rebalance_experts(weight, *args, old))
    assert len(list(tmp_path.glob("vllm-eplb-load-*-2x8.json"))) == 3


@pytest.mark.parametrize("fmt", ["json", "pt", "safetensors"])
def test_windows_written_in_each_format_numbered_and_by_rank_zero_only(monkeypatch, tmp_path,
                                                                     caplog, fmt):
    monkeypatch.setenv(offline.ENV_LOAD_DIR, str(tmp_path))
    monkeypatch.setenv(offline.ENV_LOAD_FORMAT, fmt)
    (tmp_path / f"vllm-eplb-load-000007-2x8.{fmt}").write_text("an earlier run's")
    window = torch.arange(16, dtype=torch.int32).reshape(2, 8)
    first = offline.record_window(window, 12, 1, 1, 4)
    second = offline.record_window(window * 2, 12, 1, 1, 4)
    assert pathlib.Path(first).name == f"vllm-eplb-load-000008-2x8.{fmt}"
    assert pathlib.Path(second).name == f"vllm-eplb-load-000009-2x8.{fmt}"
    np.testing.assert_array_equal(moestat.read_logical_counts(first), window.numpy())
    np.testing.assert_array_equal(moestat.read_logical_counts(second), window.numpy() * 2)
    assert offline.record_window(torch.zeros(2, 8, dtype=torch.int32), 12, 1, 1, 4) is None
    monkeypatch.setattr(offline, "_ep_rank", lambda: 3)
    assert offline.record_window(window, 12, 1, 1, 4) is None
    assert len(list(tmp_path.iterdir())) == 3


def test_a_directory_that_cannot_be_written_is_logged_once(monkeypatch, tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(offline.ENV_LOAD_DIR, str(blocker / "loads"))
    with caplog.at_level(logging.WARNING, logger="moestat"):
        for _ in range(3):
            assert offline.record_window(torch.ones(2, 8, dtype=torch.int32), 12, 1, 1, 4) is None
    assert len([r for r in caplog.records if r.name.startswith("moestat")]) == 1
    assert offline.faults() == {"load_window": 3}


@pytest.mark.parametrize("planted", [
    "vllm-eplb-load-" + "9" * 231 + "-2x8.json",  # 255 bytes: one digit more is too long
    "vllm-eplb-load-999999999-2x8.json",           # the highest number continued
])
def test_names_do_not_grow_with_what_the_directory_holds(monkeypatch, tmp_path, caplog, planted):
    assert len(planted) <= 255
    (tmp_path / planted).write_text("planted")
    monkeypatch.setenv(offline.ENV_LOAD_DIR, str(tmp_path))
    window = torch.ones(2, 8, dtype=torch.int32)
    with caplog.at_level(logging.WARNING, logger="moestat"):
        written = [pathlib.Path(offline.record_window(window * i, 12, 1, 1, 4)) for i in (1, 2, 3)]
    assert not [r for r in caplog.records if r.name.startswith("moestat")]
    assert offline.faults() == {}
    first = 1 if len(planted) == 255 else 1_000_000_000
    assert [p.name for p in written] == [
        f"vllm-eplb-load-{number:06d}-2x8.json" for number in range(first, first + 3)]
    for i, path in enumerate(written, start=1):
        np.testing.assert_array_equal(moestat.read_logical_counts(path), window.numpy() * i)


def test_a_failing_dump_keeps_being_counted_and_the_next_one_is_written(monkeypatch, tmp_path,
                                                                       caplog):
    monkeypatch.setenv(offline.ENV_LOAD_DIR, str(tmp_path))
    window = torch.ones(2, 8, dtype=torch.int32)

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with caplog.at_level(logging.WARNING, logger="moestat"):
        with monkeypatch.context() as full:
            full.setattr(offline.os, "link", no_space)
            for _ in range(3):
                assert offline.record_window(window, 12, 1, 1, 4) is None
        assert offline.faults() == {"load_window": 3}
        written = offline.record_window(window, 12, 1, 1, 4)  # space again
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("moestat")]
    assert len(logged) == 1 and "No space left" in logged[0] and "faults()" in logged[0], logged
    assert pathlib.Path(written).parent == tmp_path
    assert sorted(p.name for p in tmp_path.iterdir()) == [pathlib.Path(written).name]


def test_load_window_counts_reads_vllms_tensors(tmp_path):
    # 2 layers, 4 experts, 6 slots (a slot of layer 1 empty, as elastic EP pads); window of 3
    phy2log = torch.tensor([[0, 1, 2, 3, 0, 0], [3, 2, 1, 0, 1, -1]])
    window = torch.zeros(3, 2, 6, dtype=torch.int32)
    window[0] = torch.tensor([[1, 0, 0, 0, 2, 3], [0, 0, 0, 0, 0, 9]])   # written last (step 1)
    window[1] = torch.tensor([[0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0]])   # the oldest
    window[2] = torch.tensor([[0, 5, 0, 7, 0, 0], [0, 0, 4, 0, 4, 0]])
    ring = moestat.vllm.load_window_counts((window, phy2log))
    assert ring.dtype == np.int64 and ring.shape == (3, 2, 4)
    np.testing.assert_array_equal(ring[0], [[6, 0, 0, 0], [0, 0, 0, 0]])  # slot 5 of layer 1: none
    np.testing.assert_array_equal(ring[1], [[0, 0, 0, 0], [1, 2, 1, 1]])
    np.testing.assert_array_equal(ring[2], [[0, 5, 0, 7], [0, 8, 0, 0]])  # slots 2, 4: expert 1
    # with vLLM's write position, oldest first; from a torch.save file as from the dict
    tensors = {"expert_load_window": window, "physical_to_logical_map": phy2log,
               "expert_load_window_step": 1, "num_logical_experts": 5}
    torch.save(tensors, tmp_path / "window.pt")
    for source in (tensors, tmp_path / "window.pt", str(tmp_path / "window.pt")):
        ordered = moestat.vllm.load_window_counts(source)
        assert ordered.shape == (3, 2, 5)
        np.testing.assert_array_equal(ordered[..., :4], ring[[1, 2, 0]])
        assert not ordered[..., 4].any()
    written = moestat.vllm.write_load_window(tmp_path / "window.json", tensors)
    read = moestat.read_counts(tmp_path / "window.json")
    assert read["has_window_axis"]
    np.testing.assert_array_equal(read["counts"], written)
    with pytest.raises(ValueError, match="expert_load_window"):
        moestat.vllm.load_window_counts((window[0], phy2log))
    with pytest.raises(ValueError, match="missing"):
        moestat.vllm.load_window_counts({"expert_load_window": window})
    with pytest.raises(ValueError, match="beyond"):
        moestat.vllm.load_window_counts((window, phy2log), num_logical_experts=3)


def test_load_window_tensors_of_a_real_eplb_state(vllm_gloo_world, restore_policies, monkeypatch):
    vllm_harness.cpu_stand_ins(monkeypatch)
    state, model, model_state = vllm_harness.new_eplb_state(vllm_gloo_world)
    rng = np.random.default_rng(3)
    passes = [skewed_pass(rng) for _ in range(3)]
    # window_size steps before the next rearrange, as vLLM starts recording
    state.expert_rearrangement_step = state.expert_rearrangement_step_interval - \
        vllm_gloo_world.eplb_config.window_size
    for load in passes[:2]:
        model_state.expert_load_pass.copy_(load)
        state.step()
    assert state.expert_rearrangement_step != 0
    tensors = moestat.vllm.load_window_tensors(state)
    assert tensors["expert_load_window"].shape == (vllm_gloo_world.eplb_config.window_size,
                                                   NUM_LAYERS, NUM_PHYSICAL)
    counts = moestat.vllm.load_window_counts(state)
    assert counts.shape == (vllm_gloo_world.eplb_config.window_size, NUM_LAYERS, NUM_EXPERTS)
    phy2log = model_state.physical_to_logical_map
    np.testing.assert_array_equal(counts[-2], logical(passes[0], phy2log))  # oldest first
    np.testing.assert_array_equal(counts[-1], logical(passes[1], phy2log))
    assert not counts[:-2].any()
    with pytest.raises(ValueError, match="no model"):
        moestat.vllm.load_window_counts(state, model="another")
