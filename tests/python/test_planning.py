"""Planners and metrics through Python: eplb.py's results, moestat's never worse in-sample."""
import json

import numpy as np
import pytest

import moestat

README_WEIGHT = np.array([[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
                          [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]])


def test_rebalance_experts_matches_the_reference_on_its_readme_example(shared_dir):
    golden = json.loads((shared_dir / "golden" / "eplb_reference.json").read_text())
    case = next(c for c in golden["cases"] if c["name"] == "readme_example")
    for result in case["results"].values():
        config = result["config"]
        phy2log, log2phy, logcnt = moestat.rebalance_experts(
            np.array(case["weight"]), config["num_replicas"], config["num_groups"],
            config["num_nodes"], config["num_gpus"])
        for layer, has_ties in enumerate(result["layer_has_ties"]):
            if not has_ties:
                assert phy2log[layer].tolist() == result["phy2log"][layer]
        assert logcnt.tolist() == result["logcnt"]
        # log2phy holds each expert's slots, -1 padded.
        for layer in range(phy2log.shape[0]):
            for expert in range(logcnt.shape[1]):
                slots = log2phy[layer, expert]
                slots = slots[slots >= 0]
                assert len(slots) == logcnt[layer, expert]
                assert (phy2log[layer, slots] == expert).all()


def test_rebalance_experts_answers_torch_with_torch():
    torch = pytest.importorskip("torch")
    phy2log, log2phy, logcnt = moestat.rebalance_experts(torch.tensor(README_WEIGHT), 16, 4, 2, 8)
    assert isinstance(phy2log, torch.Tensor) and phy2log.dtype == torch.int64
    expected, _, _ = moestat.rebalance_experts(README_WEIGHT, 16, 4, 2, 8)
    assert phy2log.tolist() == expected.tolist()


def test_moestat_planner_is_never_worse_in_sample(rng):
    loads = rng.gamma(0.3, 1.0, size=(6, 64)) * 1000
    for num_groups, num_nodes in ((8, 2), (1, 1)):
        reference = moestat.plan_deepseek(loads, 80, num_groups, num_nodes, 16)
        better = moestat.plan_moestat(loads, 80, num_groups, num_nodes, 16)
        ours = moestat.evaluate_placement(loads, better, 16)["layer_balancedness"]
        theirs = moestat.evaluate_placement(loads, reference, 16)["layer_balancedness"]
        assert (ours >= theirs - 1e-12).all()
        assert better.physical_to_logical.shape == (6, 80)
        assert (better.replica_counts.sum(axis=1) == 80).all()
    scenarios = np.stack([loads, loads[::-1]])
    assert moestat.plan_moestat(scenarios, 80, 1, 1, 16, objective="worst_case").num_layers == 6


def test_metrics_and_hot_expert_masks():
    placement = moestat.plan_deepseek(README_WEIGHT, 16, 4, 2, 8)
    report = moestat.evaluate_placement(README_WEIGHT, placement, 8)
    assert 0 < report["balancedness"] <= 1
    assert report["layer_balancedness"].shape == (2,)
    assert 0 < moestat.expert_gini(README_WEIGHT) < 1
    mask = moestat.hot_expert_mask(README_WEIGHT, 3, strategy="frequency")
    assert mask.shape == (2, 12) and mask.sum() == 6
    hottest = np.zeros_like(mask)
    hottest[np.arange(2)[:, None], np.argsort(-README_WEIGHT, axis=1)[:, :3]] = 1
    assert moestat.hot_expert_hit_rate(README_WEIGHT, mask) >= moestat.hot_expert_hit_rate(
        README_WEIGHT, np.roll(hottest, 1, axis=1))


def test_bad_plans_are_refused_by_name():
    with pytest.raises(moestat.Error, match="replicas"):
        moestat.plan_deepseek(README_WEIGHT, 15, 4, 2, 8)
    with pytest.raises(moestat.Error, match="loads"):
        moestat.plan_deepseek(np.ones(12), 16, 4, 2, 8)
    with pytest.raises(moestat.Error):
        moestat.plan_deepseek(-README_WEIGHT, 16, 4, 2, 8)
    with pytest.raises(moestat.Error, match="objective"):
        moestat.plan_moestat(README_WEIGHT, 16, 4, 2, 8, objective="best")
    with pytest.raises(ValueError, match="planner"):
        moestat.rebalance_experts(README_WEIGHT, 16, 4, 2, 8, planner="fastest")
