"""The balance metrics the engine adapters use, from C++ (moestat.gpu_loads,
placement_gpu_loads, balancedness_sum_ratio), against the numpy formulas the adapters
computed themselves before (SGLang's GPU loads, vLLM's rank loads and balancedness), on the
same random inputs."""

import numpy as np
import pytest

import moestat


def reference_gpu_loads(physical_counts, num_gpus):
    """SGLang's compute_gpu_physical_count: slots split evenly over the GPUs, in order."""
    *outer, slots = physical_counts.shape
    return physical_counts.reshape(*outer, num_gpus, slots // num_gpus).sum(-1)


def reference_rank_loads(weight, physical_to_logical, num_ranks):
    """vLLM's rank loads: an expert's load split evenly over its replicas."""
    num_layers, num_experts = weight.shape
    counts = np.zeros((num_layers, num_experts), dtype=np.int64)
    np.add.at(counts, (np.arange(num_layers)[:, None], physical_to_logical), 1)
    per_slot = np.take_along_axis(weight / np.maximum(counts, 1), physical_to_logical, axis=1)
    return per_slot.reshape(num_layers, num_ranks, -1).sum(axis=2)


def reference_sum_ratio(gpu_loads):
    """vLLM's _compute_eplb_load_stats: sum_l mean_r / sum_l max_r, 0 without load."""
    mean, peak = gpu_loads.mean(axis=-1).sum(axis=-1), gpu_loads.max(axis=-1).sum(axis=-1)
    return np.where(peak > 0, mean / np.where(peak > 0, peak, 1), 0.0)


def random_map(rng, num_layers, num_slots, num_experts):
    """Every expert once per layer, the rest of the slots random replicas, shuffled."""
    rows = [rng.permutation(np.concatenate([np.arange(num_experts),
                                            rng.integers(0, num_experts, num_slots - num_experts)]))
            for _ in range(num_layers)]
    return np.array(rows, dtype=np.int64)


@pytest.mark.parametrize("seed", range(20))
def test_gpu_loads_equal_sglangs(seed):
    rng = np.random.default_rng(seed)
    num_gpus = int(rng.integers(1, 5))
    shape = (int(rng.integers(0, 4)), int(rng.integers(1, 5)), num_gpus * int(rng.integers(1, 5)))
    counts = rng.integers(0, 1000, shape)
    loads = moestat.gpu_loads(counts, num_gpus)
    assert loads.dtype == np.int64
    np.testing.assert_array_equal(loads, reference_gpu_loads(counts, num_gpus))
    rows = counts.reshape(-1, shape[-1])  # [passes x layers, slots]
    np.testing.assert_array_equal(moestat.gpu_loads(rows, num_gpus),
                                  reference_gpu_loads(rows, num_gpus))


@pytest.mark.parametrize("seed", range(20))
def test_placement_gpu_loads_and_balancedness_equal_vllms(seed):
    rng = np.random.default_rng(seed)
    num_ranks, num_experts = int(rng.integers(1, 5)), int(rng.integers(1, 9))
    num_layers = int(rng.integers(1, 5))
    least = -(-num_experts // num_ranks)  # slots per rank to hold every expert once
    num_slots = num_ranks * int(rng.integers(least, least + 3))
    phy2log = random_map(rng, num_layers, num_slots, num_experts)
    weight = rng.integers(0, 100, (num_layers, num_experts)).astype(np.float64)
    placement = moestat.Placement(phy2log, num_logical_experts=num_experts)
    loads = moestat.placement_gpu_loads(weight, placement, num_ranks)
    np.testing.assert_allclose(loads, reference_rank_loads(weight, phy2log, num_ranks),
                               rtol=1e-12, atol=0)
    assert moestat.balancedness_sum_ratio(loads) == pytest.approx(
        float(reference_sum_ratio(loads)), rel=1e-12, abs=0)


def test_balancedness_sum_ratio_by_hand_and_of_many_passes():
    # Layer loads [1, 3] and [2, 2]: means 2 and 2, maxes 3 and 2.
    assert moestat.balancedness_sum_ratio(np.array([[1, 3], [2, 2]])) == pytest.approx(4 / 5)
    assert moestat.balancedness_sum_ratio(np.zeros((3, 2))) == 0.0  # no load: 0, as vLLM logs
    passes = np.array([[[1, 3], [2, 2]], [[0, 0], [0, 0]], [[5, 5], [0, 0]]])
    values = moestat.balancedness_sum_ratio(passes)
    np.testing.assert_allclose(values, reference_sum_ratio(passes), rtol=1e-15)
    assert values.shape == (3,)
    assert moestat.balancedness_sum_ratio(np.zeros((0, 2, 2))).shape == (0,)


def test_bad_shapes_are_refused_by_name():
    with pytest.raises(moestat.Error, match="3 GPUs cannot share 4 physical expert slots"):
        moestat.gpu_loads(np.ones((2, 4), dtype=np.int64), 3)
    with pytest.raises(moestat.Error, match="physical_counts: entry 1 .* not a non-negative"):
        moestat.gpu_loads(np.array([1, -1]), 1)
    with pytest.raises(moestat.Error, match="expected \\[..., layers, gpus\\]"):
        moestat.balancedness_sum_ratio(np.ones(4))
    with pytest.raises(moestat.Error, match="no layer or no GPU"):
        moestat.balancedness_sum_ratio(np.ones((2, 0)))
    with pytest.raises(moestat.Error, match="GPU load .*overflow|overflow"):
        moestat.gpu_loads(np.array([2**62, 2**62], dtype=np.int64) * 1, 1)
    placement = moestat.Placement(np.array([[0, 1]]), num_logical_experts=2)
    with pytest.raises(moestat.Error, match="do not divide evenly over 3 GPUs"):
        moestat.placement_gpu_loads(np.ones((1, 2)), placement, 3)
