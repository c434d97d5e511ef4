"""moestat.sglang against SGLang's own recorder on a GPU: CUDA tensors, hooks captured in
``torch.cuda.graph`` as SGLang captures its decode graphs, recording toggled between replays,
and the count buffer fed by SGLang's own fused dispatch-map kernel. Skips without CUDA."""

import dataclasses
import importlib
import sys
import types

import numpy as np
import pytest
import torch

import sglang_harness
import sglang_scenarios
from sglang_scenarios import Setup
from test_sglang_differential import assert_dumps_match, run_differential, setup_id

import moestat
import moestat.sglang

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and moestat.has_cuda), reason="needs a GPU and a CUDA build")

CUDA_SETUPS = [
    Setup("stat", buffer_size=5, device="cuda"),
    Setup("stat", buffer_size=-1, device="cuda"),
    Setup("stat", buffer_size=4, moe_a2a_backend="deepep", deepep_mode="low_latency", device="cuda"),
    Setup("per_pass", device="cuda"),
    Setup("stat", buffer_size=6, report_mode="both", threshold=0.9, device="cuda"),
]


@pytest.mark.parametrize("setup", CUDA_SETUPS, ids=setup_id)
def test_eager_cuda_dumps_equal_sglangs(setup, sglang_recorder_module, single_process_group,
                                        tmp_path):
    module, config = sglang_recorder_module
    drivers, files = run_differential(dataclasses.replace(setup), module, config, 3, tmp_path)
    assert_dumps_match(setup, drivers, files)
    assert isinstance(drivers[1].recorder.recorder, moestat.CudaRecorder)


class CapturedDecode:
    """A decode step as SGLang runs it under CUDA graphs: the router writes top-k ids of a
    padded batch into a static buffer (padding rows -1), every MoE layer calls the recorder's
    hook inside ``with_current_layer``, and the whole step is captured once, outside
    ``with_forward_pass``; serving replays it inside ``with_forward_pass``."""

    def __init__(self, recorder, static_ids, num_layers):
        self.graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._step(recorder, static_ids, num_layers)  # warm-up, as SGLang does
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(self.graph):
            self._step(recorder, static_ids, num_layers)

    @staticmethod
    def _step(recorder, static_ids, num_layers):
        for layer in range(num_layers):
            with recorder.with_current_layer(layer):
                recorder.on_select_experts(static_ids[layer])


@pytest.mark.parametrize("mode,buffer_size", [("stat", 4), ("stat", -1), ("per_pass", 1000)])
def test_captured_decode_graphs_record_every_replay_while_recording(
        mode, buffer_size, sglang_recorder_module, single_process_group, tmp_path, monkeypatch):
    module, config = sglang_recorder_module
    setup = Setup(mode, buffer_size=buffer_size, device="cuda")
    setup.configure(config)
    rng = np.random.default_rng(4)
    metadata = sglang_harness.make_metadata(
        setup.num_layers, setup.num_logical, setup.num_physical, 1, device="cuda",
        physical_to_logical_map=sglang_scenarios.placement_map(setup, rng))
    theirs = module.ExpertDistributionRecorder.init_new(metadata, rank=0)
    ours = moestat.sglang.ExpertDistributionRecorder.init_new(metadata, rank=0)
    max_batch = 16
    static_ids = torch.full((setup.num_layers, max_batch, setup.top_k), -1, dtype=torch.int32,
                            device="cuda")
    graphs = [CapturedDecode(r, static_ids, setup.num_layers) for r in (theirs, ours)]

    dumps = {id(theirs): [], id(ours): []}
    for step in range(12):
        if step == 2:
            for recorder in (theirs, ours):
                recorder.start_record()
        if step == 6:
            for recorder in (theirs, ours):
                recorder.stop_record()
        if step == 8:
            for recorder in (theirs, ours):
                recorder.start_record()
        batch_size = int(rng.integers(1, max_batch + 1))
        ids = torch.tensor(np.stack([[rng.choice(setup.num_physical, setup.top_k, replace=False)
                                      for _ in range(batch_size)]
                                     for _ in range(setup.num_layers)]), dtype=torch.int32)
        static_ids.fill_(-1)
        static_ids[:, :batch_size] = ids.cuda()
        forward_batch = sglang_harness.make_forward_batch(batch_size, "decode", device="cuda")
        for recorder, graph in zip((theirs, ours), graphs):
            with recorder.with_forward_pass(step, forward_batch):
                graph.graph.replay()
        if step in (5, 11):
            for recorder in (theirs, ours):
                monkeypatch.setenv("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR",
                                   str(tmp_path / type(recorder).__name__))
                dumps[id(recorder)].append(
                    recorder.dump_record("object" if mode == "stat" else "file"))
    torch.cuda.synchronize()
    if mode == "stat":
        for a, b in zip(dumps[id(theirs)], dumps[id(ours)]):
            sglang_scenarios.assert_same_dump(a, b)
        assert dumps[id(ours)][0]["logical_count"].sum() > 0
    else:
        their_files = sglang_scenarios.load_dumps(tmp_path / type(theirs).__name__)
        our_files = sglang_scenarios.load_dumps(tmp_path / type(ours).__name__)
        assert len(our_files) == len(their_files) == 2
        for (_, a), (_, b) in zip(their_files, our_files):
            sglang_scenarios.assert_same_dump(a, b)
    assert ours.faults == {}


def _sglang_fused_kernel():
    """SGLang's fused dispatch-map-and-record Triton kernel (real file); its dispatch-info
    type lives in a module that needs the whole expert-location machinery, and the kernel is
    called without dispatch info, so that type is a stand-in."""
    pytest.importorskip("triton")
    sglang_harness.load_sglang_expert_distribution()
    name = "sglang.srt.eplb.expert_location_dispatch"
    if name not in sys.modules:
        stand_in = types.ModuleType(name)
        stand_in.ExpertLocationDispatchInfo = type("ExpertLocationDispatchInfo", (), {})
        sys.modules[name] = stand_in
    return importlib.import_module("sglang.srt.eplb.eplb_map_record_fused").eplb_map_and_record_fused


def test_the_count_buffer_records_what_sglangs_fused_kernel_adds(sglang_recorder_module,
                                                                 single_process_group):
    fused = _sglang_fused_kernel()
    module, config = sglang_recorder_module
    setup = Setup("stat", buffer_size=3, device="cuda")
    setup.configure(config)
    metadata = sglang_harness.make_metadata(setup.num_layers, setup.num_logical,
                                            setup.num_physical, 1, device="cuda")
    theirs = module.ExpertDistributionRecorder.init_new(metadata, rank=0)
    ours = moestat.sglang.ExpertDistributionRecorder.init_new(metadata, rank=0)
    rng = np.random.default_rng(9)
    for recorder in (theirs, ours):
        recorder.start_record()
    for step in range(5):
        ids = torch.tensor(rng.integers(-1, setup.num_physical, (10, setup.top_k)),
                           dtype=torch.int32, device="cuda")
        valid = torch.tensor([int(rng.integers(0, 11))], dtype=torch.int32, device="cuda")
        forward_batch = sglang_harness.make_forward_batch(10, "decode", device="cuda")
        for recorder in (theirs, ours):
            with recorder.with_forward_pass(step, forward_batch):
                for layer in range(setup.num_layers):
                    with recorder.with_current_layer(layer):
                        row = recorder.get_current_pass_count_buffer(layer)
                        assert row is not None and row.dtype == torch.int32 and row.is_cuda
                        assert fused(ids, None, row, valid) is not None
    sglang_scenarios.assert_same_dump(theirs.dump_record("object"), ours.dump_record("object"))
    assert ours.faults == {}
