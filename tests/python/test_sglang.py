"""The SGLang-style facade: the same calls as SGLang's recorder, a missing layer refused."""
import numpy as np
import pytest

import moestat
from moestat.sglang import ExpertDistributionRecorder
from conftest import random_topk


def test_forward_passes_dump_what_was_routed(tmp_path, rng):
    topology = moestat.ModelTopology(4, 16, 2, moe_layers=[False, True, True, True])
    recorder = ExpertDistributionRecorder(topology, mode="stat", buffer_size=10, dump_dir=tmp_path)
    recorder.start_record()
    expected = np.zeros((4, 16), dtype=np.int64)
    for step in range(3):
        with recorder.with_forward_pass(step):
            for layer in range(1, 4):
                with recorder.with_current_layer(layer):
                    ids = random_topk(rng, 20, 16, 2)
                    recorder.on_select_experts(ids)
                    expected[layer] += np.bincount(ids.reshape(-1), minlength=16)
            with recorder.disable_this_region(), recorder.with_current_layer(1):
                recorder.on_select_experts(random_topk(rng, 20, 16, 2))  # ignored
    path = recorder.dump_record()
    assert path.parent == tmp_path
    np.testing.assert_array_equal(moestat.read_logical_counts(path).sum(axis=0), expected)


def test_a_hook_without_its_layer_is_an_error_never_slot_0(rng):
    topology = moestat.ModelTopology.uniform(num_layers=2, num_experts=8, top_k=2)
    recorder = ExpertDistributionRecorder(topology)
    recorder.start_record()
    with recorder.with_forward_pass(0):
        with pytest.raises(moestat.Error, match="outside with_current_layer"):
            recorder.on_select_experts(random_topk(rng, 4, 8, 2))
        with pytest.raises(moestat.Error, match="None"):
            with recorder.with_current_layer(None):
                pass
    assert recorder.recorder.snapshot().logical_counts.sum() == 0


def test_deepep_low_latency_counts_land_on_the_ranks_slots():
    topology = moestat.ModelTopology(1, 8, 2, ep_size=2, num_shared_expert_slots=1)
    recorder = ExpertDistributionRecorder(topology, rank=1)
    recorder.start_record()
    with recorder.with_forward_pass(0), recorder.with_current_layer(0):
        recorder.on_deepep_dispatch_low_latency(np.array([1, 2, 3, 4, 99], dtype=np.int32))
    counts = recorder.recorder.snapshot().logical_counts[0, 0]
    np.testing.assert_array_equal(counts, [0, 0, 0, 0, 1, 2, 3, 4])


def test_cuda_needs_a_cuda_build():
    topology = moestat.ModelTopology.uniform(num_layers=1, num_experts=4, top_k=1)
    if moestat.has_cuda:
        pytest.skip("this build has the CUDA recorder")
    with pytest.raises(moestat.Error, match="without the CUDA recorder"):
        ExpertDistributionRecorder(topology, device="cuda")
    with pytest.raises(moestat.Error, match="device"):
        ExpertDistributionRecorder(topology, device="tpu")
