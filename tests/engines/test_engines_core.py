"""moestat.engines, the core every engine adapter records through: faults counted by kind and
logged once per instance, the recorder made for (and checked against) a model's device, the
routers checked against a topology, and the cross-rank sum that counts every token once
(over two gloo processes)."""
import logging
import os
import tempfile
import types

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import moestat
from moestat.engines import devices, ranks, topology
from moestat.engines.faults import Faults

logger = logging.getLogger("moestat.test_engines_core")


def test_faults_are_counted_by_kind_logged_once_and_read_as_a_mapping(caplog):
    faults = Faults(logger, "thing.faults")
    with caplog.at_level(logging.ERROR, logger=logger.name):
        faults.add("begin_pass", "no pass open")
        faults.add("begin_pass", "no pass open again")
        faults.add("rows", "5 rows not counted", count=5)
    assert faults == {"begin_pass": 2, "rows": 5}
    assert faults["rows"] == 5 and faults.get("other", 0) == 0 and len(faults) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "moestat: no pass open (logged once; thing.faults['begin_pass'] counts them)",
        "moestat: 5 rows not counted (logged once; thing.faults['rows'] counts them)"]
    faults.clear()
    assert faults == {}


def test_faults_log_once_per_cause_where_given_and_each_instance_its_own(caplog):
    first, second = Faults(logger, "a", logging.WARNING), Faults(logger, "b")
    with caplog.at_level(logging.WARNING, logger=logger.name):
        for cause in ("ENOSPC", "ENOSPC", "EACCES"):
            first.add("load_window", f"cannot write ({cause})", cause=cause)
        second.add("load_window", "cannot write")
    assert first == {"load_window": 3} and second == {"load_window": 1}
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * 2 + [logging.ERROR]


def test_the_recorder_is_made_for_the_device():
    model_topology = moestat.ModelTopology(2, 8, 2)
    assert isinstance(devices.make_recorder(model_topology, "cpu"), moestat.CpuRecorder)
    assert isinstance(devices.make_recorder(model_topology, torch.device("cpu"), routes=True),
                      moestat.CpuRouteRecorder)
    with pytest.raises(moestat.Error, match="'meta': moestat records on cuda or cpu"):
        devices.make_recorder(model_topology, "meta")


def test_a_host_recorder_is_refused_for_a_model_on_a_gpu_and_follows_no_stream():
    recorder = moestat.CpuRecorder(moestat.ModelTopology(2, 8, 2))
    devices.check_recorder_device(recorder, "cpu", "Model")
    with pytest.raises(moestat.Error, match=r"Model is on cuda:0: record it with "
                       r"moestat.CudaRecorder \(CpuRecorder reads host memory\)"):
        devices.check_recorder_device(recorder, "cuda:0", "Model")
    routes = moestat.CpuRouteRecorder(moestat.ModelTopology(2, 8, 2))
    with pytest.raises(moestat.Error, match="moestat.CudaRouteRecorder"):
        devices.check_recorder_device(routes, "cuda", "Model")
    devices.StreamFollower(recorder).follow()  # no stream on the host: nothing to do


def test_a_module_without_parameters_runs_on_the_cpu():
    assert devices.device_of(torch.nn.ReLU()) == torch.device("cpu")
    assert devices.device_of(torch.nn.Linear(2, 2)) == torch.device("cpu")


def test_routers_that_do_not_fit_the_topology_are_refused():
    model_topology = moestat.ModelTopology(3, 8, 2, moe_layers=[False, True, True])
    router = types.SimpleNamespace(num_experts=8, top_k=2)
    topology.check_routers(torch.nn.ReLU(), model_topology, {1: router, 2: router})
    with pytest.raises(moestat.Error, match=r"ReLU: routers in decoder layers \[1\], but the "
                       r"recorder's topology has MoE layers \[1, 2\]"):
        topology.check_routers(torch.nn.ReLU(), model_topology, {1: router})
    wide = types.SimpleNamespace(global_num_experts=16)
    with pytest.raises(moestat.Error, match="layer 2's router has global_num_experts=16"):
        topology.check_routers(torch.nn.ReLU(), model_topology, {1: router, 2: wide},
                               experts_attribute="global_num_experts")


@pytest.mark.parametrize("rank, replicated, adds", [
    (0, True, True), (1, True, False), (0, False, True), (1, False, True)])
def test_every_token_once_only_the_first_of_ranks_that_share_tokens_adds(rank, replicated,
                                                                          adds):
    assert ranks.adds_its_counts(rank, replicated) is adds


def test_without_torch_distributed_the_sum_is_this_ranks_own():
    counts = torch.arange(6).reshape(2, 3)
    total = ranks.sum_over_ranks(counts, adds=True)
    assert total.tolist() == counts.tolist() and total is not counts
    assert ranks.sum_over_ranks(counts, adds=False).sum() == 0


def _sum_on_rank(rank, init_file, results):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        # Rank 0 ran 2 passes, rank 1 three (its first before rank 0 began); rank 1's copy of
        # a replicated count must not add.
        counts = torch.full((2 + rank, 2), rank + 1, dtype=torch.int64)
        aligned = ranks.sum_over_ranks(counts, adds=True, align_passes=True)
        replicated = ranks.sum_over_ranks(torch.ones(2, 2, dtype=torch.int64),
                                          adds=ranks.adds_its_counts(rank, True))
        np.save(os.path.join(results, f"{rank}.npy"),
                np.stack([aligned.numpy()[1:], replicated.numpy()]))
        np.save(os.path.join(results, f"{rank}-first.npy"), aligned.numpy()[0])
    finally:
        dist.destroy_process_group()


def test_the_cross_rank_sum_aligns_passes_at_the_newest_and_counts_shared_tokens_once():
    with tempfile.TemporaryDirectory() as results:
        mp.spawn(_sum_on_rank, args=(os.path.join(results, "init"), results), nprocs=2)
        for rank in range(2):
            newest, replicated = np.load(os.path.join(results, f"{rank}.npy"))
            np.testing.assert_array_equal(newest, np.full((2, 2), 3))  # 1 + 2, both ranks
            np.testing.assert_array_equal(replicated, np.ones((2, 2)))  # once, not twice
            # rank 0 had no pass then: an empty one in its place
            np.testing.assert_array_equal(np.load(os.path.join(results, f"{rank}-first.npy")),
                                          [2, 2])
