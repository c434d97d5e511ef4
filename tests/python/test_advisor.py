"""The rebalance advisor through Python: the decision follows the move cost, the moves are the
slots that change, the advice is a function of the seed, bad input raises moestat.Error."""
import numpy as np
import pytest

import moestat

LAYERS, EXPERTS, SLOTS, GPUS, PASSES = 2, 8, 16, 4, 10


def skewed_counts():
    """Experts 0 and 1 hot in every pass; the trivial placement puts both on GPUs 0 and 2."""
    rng = np.random.default_rng(3)
    counts = rng.integers(9, 12, size=(PASSES, LAYERS, EXPERTS))
    counts[:, :, :2] = rng.integers(950, 1050, size=(PASSES, LAYERS, 2))
    return counts


def advise(counts, **options):
    current = moestat.Placement.trivial(LAYERS, SLOTS, EXPERTS)
    return moestat.advise_rebalance(current, counts, GPUS, seconds_per_balanced_pass=0.01,
                                    horizon_passes=1000, num_bootstrap=100, seed=5, **options)


def test_rebalances_when_moves_are_cheap_and_keeps_when_they_are_not():
    cheap = advise(skewed_counts(), seconds_per_expert=0.001)
    assert cheap["rebalance"], cheap["reason"]
    assert cheap["reason"].startswith("rebalance:")
    current = moestat.Placement.trivial(LAYERS, SLOTS, EXPERTS).physical_to_logical
    planned = cheap["placement"].physical_to_logical
    moves = cheap["moves"]
    assert moves.shape == (int((current != planned).sum()), 4)
    for layer, slot, before, after in moves:
        assert current[layer, slot] == before and planned[layer, slot] == after
    best = cheap["candidates"][cheap["best"]]
    assert best["balancedness_after"]["value"] > cheap["balancedness_now"]["value"]

    costly = advise(skewed_counts(), bytes_per_expert=1e12, link_bytes_per_second=1e9)
    assert not costly["rebalance"], costly["reason"]
    assert costly["moves"].shape == (0, 4)
    assert (costly["placement"].physical_to_logical == current).all()


def test_is_deterministic_for_a_seed():
    first, again = advise(skewed_counts()), advise(skewed_counts())
    assert first["reason"] == again["reason"]
    assert first["balancedness_now"] == again["balancedness_now"]
    assert [c["net_gain_seconds"] for c in first["candidates"]] == \
        [c["net_gain_seconds"] for c in again["candidates"]]


def test_bad_input_raises_an_error_naming_it():
    with pytest.raises(moestat.Error, match="at least 2 passes with load"):
        advise(skewed_counts()[:1])
    with pytest.raises(moestat.Error, match="expected \\[passes, layers, experts\\]"):
        advise(skewed_counts()[0])
    with pytest.raises(moestat.Error, match="target balancedness must be in"):
        advise(skewed_counts(), targets=[0.9, 2.0])


def test_plans_for_the_regime_running_now_unless_told_to_take_the_window():
    counts = skewed_counts()
    counts[:6] = 100  # even traffic, then the skew from pass 6
    regime = advise(counts, seconds_per_expert=0.001)
    assert regime["traffic_first_pass"] == 6
    assert regime["traffic_regimes"] == 1 and not regime["traffic_recurs"]
    assert regime["num_planning_passes"] + regime["num_evaluation_passes"] == 4
    whole = advise(counts, seconds_per_expert=0.001, follow_regimes=False)
    assert whole["traffic_first_pass"] == 0
    assert whole["num_planning_passes"] + whole["num_evaluation_passes"] == PASSES
    wait = advise(counts, seconds_per_expert=0.001, min_evaluation_passes=3)
    assert not wait["rebalance"] and wait["reason"].startswith("keep the placement for now")
    with pytest.raises(moestat.Error, match="least balancedness gain"):
        advise(counts, min_balancedness_gain=1.0)
