"""Recorder.record_topk_layers through Python: several layers in one call count what
record_topk counts layer by layer, with every form of the valid-token count; a wrong layer
counts nothing."""
import numpy as np
import pytest

import moestat
from conftest import random_topk


def test_counts_what_record_topk_counts_layer_by_layer(rng):
    topology = moestat.ModelTopology.uniform(num_layers=4, num_experts=16, top_k=4)
    one_by_one = moestat.CpuRecorder(topology, window_size=100)
    batched = moestat.CpuRecorder(topology, window_size=100)
    one_by_one.start()
    batched.start()
    for pass_id, valid in enumerate([None, 30, np.array([7], dtype=np.int32)]):
        layers = [0, 1, 2, 3]
        ids = [random_topk(rng, 50, 16, 4, dtype)
               for dtype in (np.int32, np.int64, np.int32, np.int64)]
        ids[2] = np.asfortranarray(ids[2])  # strides the view must follow
        one_by_one.begin_pass(pass_id)
        batched.begin_pass(pass_id)
        for layer, layer_ids in zip(layers, ids):
            one_by_one.record_topk(layer, layer_ids, num_valid_tokens=valid)
        batched.record_topk_layers(layers, ids, num_valid_tokens=valid)
        one_by_one.end_pass()
        batched.end_pass()
    expected, actual = one_by_one.snapshot(), batched.snapshot()
    np.testing.assert_array_equal(actual.logical_counts, expected.logical_counts)
    np.testing.assert_array_equal(actual.pass_num_tokens, expected.pass_num_tokens)
    assert actual.pass_num_tokens.tolist() == [50, 30, 7]


def test_a_wrong_layer_or_a_mismatch_counts_nothing(rng):
    topology = moestat.ModelTopology.uniform(num_layers=2, num_experts=8, top_k=2)
    recorder = moestat.CpuRecorder(topology, window_size=10)
    recorder.start()
    ids = random_topk(rng, 5, 8, 2, np.int64)
    recorder.begin_pass(0)
    with pytest.raises(moestat.Error, match="record_topk_layers: layer 2 out of range"):
        recorder.record_topk_layers([0, 2], [ids, ids])
    with pytest.raises(moestat.Error, match="2 layers but 1 topk_ids arrays"):
        recorder.record_topk_layers([0, 1], [ids])
    recorder.end_pass()
    assert recorder.snapshot().logical_counts.sum() == 0
