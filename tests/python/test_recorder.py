"""The CPU recorder through Python: counts equal numpy's, every array layout, clear errors."""
import numpy as np
import pytest

import moestat
from conftest import random_topk


def expected_counts(ids, num_experts, valid=None):
    rows = ids if valid is None else ids[:valid]
    flat = rows.reshape(-1)
    flat = flat[(flat >= 0) & (flat < num_experts)]
    return np.bincount(flat, minlength=num_experts)


def test_counts_equal_numpy_for_every_dtype_and_layout(rng):
    topology = moestat.ModelTopology.uniform(num_layers=4, num_experts=16, top_k=4)
    recorder = moestat.CpuRecorder(topology, window_size=100)
    recorder.start()
    expected = np.zeros((3, 4, 16), dtype=np.int64)
    for pass_id in range(3):
        recorder.begin_pass(100 + pass_id)
        for layer, dtype in enumerate([np.int32, np.int64, np.int32, np.int64]):
            ids = random_topk(rng, 50, 16, 4, dtype)
            if layer == 2:
                ids = np.asfortranarray(ids)  # column-major: strides the view must follow
            if layer == 3:
                ids = random_topk(rng, 50, 16, 8, dtype)[:, ::2]  # every other column
            recorder.record_topk(layer, ids)
            expected[pass_id, layer] = expected_counts(ids, 16)
        recorder.end_pass()
    snapshot = recorder.snapshot()
    assert snapshot.window_size == 3
    assert snapshot.pass_ids.tolist() == [100, 101, 102]
    np.testing.assert_array_equal(snapshot.logical_counts, expected)
    np.testing.assert_array_equal(snapshot.logical_totals(), expected.sum(axis=0))


def test_padding_out_of_range_ids_and_valid_tokens(rng):
    topology = moestat.ModelTopology.uniform(num_layers=2, num_experts=8, top_k=2)
    recorder = moestat.CpuRecorder(topology)
    recorder.start()
    recorder.begin_pass(0)
    ids = np.array([[0, 1], [2, -1], [9, 3], [4, 5], [6, 7]], dtype=np.int32)
    recorder.record_topk(0, ids, num_valid_tokens=3)
    recorder.record_topk(1, ids, num_valid_tokens=np.array([4], dtype=np.int64))
    recorder.end_pass()
    snapshot = recorder.snapshot()
    np.testing.assert_array_equal(snapshot.logical_counts[0, 0], expected_counts(ids, 8, 3))
    np.testing.assert_array_equal(snapshot.logical_counts[0, 1], expected_counts(ids, 8, 4))
    assert snapshot.dropped_ids == 2  # the 9, seen by both layers
    assert snapshot.pass_num_tokens.tolist() == [4]


def test_torch_tensors_are_read_without_copies(rng):
    torch = pytest.importorskip("torch")
    topology = moestat.ModelTopology.uniform(num_layers=1, num_experts=32, top_k=8)
    recorder = moestat.CpuRecorder(topology)
    recorder.start()
    recorder.begin_pass(0)
    ids = torch.from_numpy(random_topk(rng, 64, 32, 8))
    recorder.record_topk(0, ids.t().contiguous().t())  # a transposed view of a copy
    recorder.end_pass()
    np.testing.assert_array_equal(recorder.snapshot().logical_counts[0, 0],
                                  expected_counts(ids.numpy(), 32))


def test_placement_maps_physical_slots_to_logical_experts():
    topology = moestat.ModelTopology(2, 4, 1, num_physical_experts=6)
    recorder = moestat.CpuRecorder(topology)
    placement = moestat.Placement(np.array([[0, 1, 2, 3, 0, 0], [3, 2, 1, 0, 1, 2]]), version=1)
    recorder.set_placement(placement)
    recorder.start()
    recorder.begin_pass(0)
    slots = np.array([[4], [5], [1]], dtype=np.int64)
    recorder.record_topk(0, slots)
    recorder.record_topk(1, slots)
    recorder.end_pass()
    snapshot = recorder.snapshot()
    assert snapshot.placement_versions.tolist() == [1]
    np.testing.assert_array_equal(snapshot.physical_counts[0, 0], [0, 1, 0, 0, 1, 1])
    np.testing.assert_array_equal(snapshot.logical_counts[0], [[2, 1, 0, 0], [0, 1, 2, 0]])


def test_modes_give_their_arrays(rng):
    topology = moestat.ModelTopology.uniform(num_layers=3, num_experts=8, top_k=2)
    decayed = moestat.CpuRecorder(topology, mode="decayed", decay=0.5)
    per_token = moestat.CpuRecorder(topology, mode="per_token", per_token_capacity=10)
    for recorder in (decayed, per_token):
        recorder.start()
        for pass_id in range(2):
            recorder.begin_pass(pass_id)
            recorder.record_topk(1, random_topk(rng, 6, 8, 2))
            recorder.end_pass()
    assert decayed.snapshot().decayed_logical_load.shape == (3, 8)
    assert decayed.snapshot().decayed_logical_load[1].sum() == pytest.approx(0.5 * 12 + 12)
    snapshot = per_token.snapshot()
    assert snapshot.token_physical_ids.shape == (10, 3, 2)
    assert snapshot.dropped_tokens == 2
    assert (snapshot.token_physical_ids[:, 0] == -1).all()  # layer 0 was not recorded


def test_bad_input_raises_moestat_error_naming_the_problem():
    topology = moestat.ModelTopology(3, 8, 2, moe_layers=[False, True, True])
    recorder = moestat.CpuRecorder(topology)
    recorder.start()
    recorder.begin_pass(0)
    ids = np.zeros((4, 2), dtype=np.int32)
    with pytest.raises(moestat.Error, match="layer 7 out of range"):
        recorder.record_topk(7, ids)
    with pytest.raises(moestat.Error, match="dense"):
        recorder.record_topk(0, ids)
    with pytest.raises(moestat.Error, match="must be int32 or int64, got uint8"):
        recorder.record_topk(1, ids.astype(np.uint8))
    with pytest.raises(moestat.Error, match="negative stride"):
        recorder.record_topk(1, ids[::-1])
    with pytest.raises(moestat.Error, match="num_valid_tokens"):
        recorder.record_topk(1, ids, num_valid_tokens=5)
    with pytest.raises(moestat.Error):
        moestat.ModelTopology(4, 8, 2, num_physical_experts=6)
    for bad_id in (1e12, -1, 0.5, np.nan):
        with pytest.raises(moestat.Error, match="not an expert id"):
            moestat.Placement(np.array([[bad_id, 0.0, 1.0]]))
    with pytest.raises(moestat.Error, match="mode"):
        moestat.CpuRecorder(topology, mode="sometimes")
    assert issubclass(moestat.Error, ValueError)


def test_local_counts_whose_sum_overflows_int64_raise_naming_the_call():
    # Issue 14, item 7: 2**62 added twice wrapped to -2**63.
    topology = moestat.ModelTopology(2, 4, 2, moe_layers=[False, True])
    recorder = moestat.CpuRecorder(topology)
    recorder.start()
    recorder.begin_pass(0)
    counts = np.array([2**62, 0, 0, 0], dtype=np.int64)
    recorder.record_local_counts(1, counts, 0)
    with pytest.raises(moestat.Error, match="physical expert 0: the pass's count overflows int64"):
        recorder.record_local_counts(1, counts, 0)
    recorder.end_pass()
    assert int(np.asarray(recorder.snapshot().physical_counts).max()) == 2**62
