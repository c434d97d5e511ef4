"""moestat.sglang against SGLang's own recorder (sglang 0.5.23, its real expert_distribution.py).

Both recorders are made by their ``init_new`` from the same server settings and metadata and
driven with the same randomised call sequence (sglang_scenarios.py); every dump, object and
file, must be equal key for key and element for element. Where moestat deliberately differs,
test_sglang_differences.py asserts the difference.
"""

import dataclasses
import os
import types

import numpy as np
import pytest
import torch

import sglang_harness
import sglang_scenarios
from sglang_scenarios import Setup

import moestat.sglang

SETUPS = [
    Setup("stat", buffer_size=5),
    Setup("stat", buffer_size=-1),
    Setup("stat", buffer_size=1000),
    Setup("stat", buffer_size=3, moe_a2a_backend="deepep", deepep_mode="normal"),
    Setup("stat", buffer_size=4, moe_a2a_backend="deepep", deepep_mode="low_latency"),
    Setup("stat", buffer_size=4, moe_a2a_backend="mori"),
    Setup("stat_approx", buffer_size=6, moe_a2a_backend="deepep", deepep_mode="normal"),
    Setup("stat_approx", buffer_size=-1, moe_a2a_backend="deepep", deepep_mode="normal"),
    Setup("per_pass"),
    Setup("per_pass", moe_a2a_backend="deepep", deepep_mode="low_latency"),
    Setup("per_token"),
    Setup("per_token", moe_a2a_backend="deepep", deepep_mode="normal"),
    Setup("stat", buffer_size=4, report_mode="server_log", threshold=0.9),
    Setup("stat", buffer_size=-1, report_mode="both", threshold=0.5),
    Setup("stat", buffer_size=7, report_mode="prometheus"),  # reported, no threshold: no average
    Setup("per_pass", report_mode="server_log", threshold=0.9),
]


def setup_id(setup):
    parts = [setup.mode, f"buffer{setup.buffer_size}"]
    if setup.moe_a2a_backend != "none":
        parts.append(f"{setup.moe_a2a_backend}-{setup.deepep_mode}")
    if setup.report_mode != "off":
        parts.append(f"report-{setup.report_mode}-{setup.threshold}")
    return "-".join(parts)


class _TorchWithoutGpu:
    """Stands in for the ``torch`` of SGLang's module on a machine without a GPU, where SGLang
    would touch CUDA regardless: it makes the dump's utilisation tensor on "cuda", and asks
    whether a CUDA stream is capturing (which raises where a CUDA runtime finds no usable
    driver). Here those tensors go on the CPU and no capture is underway; nothing else of
    SGLang's code is changed."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def _host(kwargs):
        if str(kwargs.get("device")) == "cuda":
            kwargs["device"] = "cpu"
        return kwargs

    def tensor(self, *args, **kwargs):
        return torch.tensor(*args, **self._host(kwargs))

    def empty(self, *args, **kwargs):
        return torch.empty(*args, **self._host(kwargs))

    @staticmethod
    def get_device_module(device=None):
        return types.SimpleNamespace(is_current_stream_capturing=lambda: False,
                                     empty_cache=lambda: None)


def run_differential(setup, module, config, seed, directory, monkeypatch=None, *, rank=0,
                     world_size=1, attn_tp_size=1, same_tokens_on_every_rank=False):
    """Drives SGLang's recorder and moestat's alike; returns (drivers, their dumps in files)."""
    setup.configure(config, attn_tp_rank=rank % attn_tp_size, attn_tp_size=attn_tp_size)
    if not torch.cuda.is_available():
        module.torch = _TorchWithoutGpu()
    control_rng = np.random.default_rng(seed)  # alike on every rank: collectives line up
    data_rng = np.random.default_rng(seed if same_tokens_on_every_rank else seed * 1000 + rank + 1)
    metadata = sglang_harness.make_metadata(
        setup.num_layers, setup.num_logical, setup.num_physical, world_size, device=setup.device,
        physical_to_logical_map=sglang_scenarios.placement_map(setup, np.random.default_rng(seed)))
    theirs = module.ExpertDistributionRecorder.init_new(metadata, rank=rank)
    ours = moestat.sglang.ExpertDistributionRecorder.init_new(metadata, rank=rank)
    assert isinstance(ours, moestat.sglang.MoestatExpertDistributionRecorder)
    assert ours.count_source == setup.source

    directories = [directory / "sglang", directory / "moestat"]

    def set_dump_dir(path):
        import os

        os.environ["SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR"] = path

    ops = sglang_scenarios.make_scenario(setup, control_rng, ep_size=world_size)
    drivers = sglang_scenarios.run_both(setup, ops, [theirs, ours], directories, data_rng,
                                        ep_size=world_size, set_dump_dir=set_dump_dir)
    files = [sglang_scenarios.load_dumps(d) if d.exists() else [] for d in directories]
    return drivers, files


def assert_dumps_match(setup, drivers, files, *, rank=0):
    theirs, ours = drivers
    extra = ("eplb_balancedness",) if setup.report_mode != "off" else ()
    assert len(ours.objects) == len(theirs.objects)
    for index, (a, b) in enumerate(zip(theirs.objects, ours.objects)):
        if extra and a is not None:
            assert "eplb_balancedness" in b and "eplb_balancedness" not in a  # documented extra
        sglang_scenarios.assert_same_dump(a, b, f"dump_record #{index}", extra_keys=extra)
    their_files, our_files = files
    assert [name_shape(n) for n, _ in our_files] == [name_shape(n) for n, _ in their_files]
    for (name, a), (_, b) in zip(their_files, our_files):
        if setup.mode == "per_token":
            b = misc_objects_as_sglang_keeps_them(a, b)
        sglang_scenarios.assert_same_dump(a, b, name, extra_keys=extra)
    if setup.mode in ("stat", "stat_approx") and rank != 0:
        assert not their_files and not our_files  # rank 0 alone writes stat dumps
    assert ours.recorder.faults == {}


def misc_objects_as_sglang_keeps_them(theirs, ours):
    """SGLang's per-token records share one ``misc_objects`` list, which is cleared at every
    recorded pass's start: in a dump every record holds the last pass's DeepEP objects.
    moestat keeps each pass's own (docs/sglang.md). Asserts exactly that, and returns ours
    with SGLang's sharing so the rest can be compared element for element."""
    records = ours["records"]
    if not records:
        return ours
    last = records[-1]["misc_objects"]
    for record in theirs["records"]:
        assert record["misc_objects"] == last
    return dict(ours, records=[dict(record, misc_objects=last) for record in records])


def name_shape(name):
    """A dump's file name without its time: ``expert_distribution_recorder_{T}[_{rank}].pt``."""
    parts = name.removesuffix(".pt").split("_")
    return "_".join(parts[:3] + ["T"] + parts[4:])


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("setup", SETUPS, ids=setup_id)
def test_one_rank_dumps_equal_sglangs(setup, seed, sglang_recorder_module, single_process_group,
                                      tmp_path):
    module, config = sglang_recorder_module
    drivers, files = run_differential(dataclasses.replace(setup), module, config, seed, tmp_path)
    assert_dumps_match(setup, drivers, files)
    # The scenario recorded something: a test that compares two empty dumps proves nothing.
    assert any(torch.as_tensor(b["logical_count"]).sum() > 0 for b in drivers[0].objects
               if isinstance(b, dict) and "logical_count" in b) or files[0]


def _rank_main(rank, world_size, store, setup, seed, directory, attn_tp_size, same_tokens):
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world_size, init_method=f"file://{store}")
    try:
        module, config = sglang_harness.load_sglang_expert_distribution()
        drivers, files = run_differential(
            setup, module, config, seed, directory / f"rank{rank}", rank=rank,
            world_size=world_size, attn_tp_size=attn_tp_size,
            same_tokens_on_every_rank=same_tokens)
        if attn_tp_size == 1:
            assert_dumps_match(setup, drivers, files, rank=rank)
        else:
            assert_replicated_counts_not_multiplied(setup, drivers, attn_tp_size)
    finally:
        dist.destroy_process_group()


def assert_replicated_counts_not_multiplied(setup, drivers, attn_tp_size):
    """Every rank of an attention-TP group routed the same tokens: SGLang's sum is
    attn_tp_size times the traffic, moestat's is the traffic (docs/sglang.md)."""
    theirs, ours = drivers
    pairs = [(a, b) for a, b in zip(theirs.objects, ours.objects) if a is not None]
    assert pairs and all(b is not None for _, b in pairs)
    assert any(b["logical_count"].sum() > 0 for _, b in pairs)
    for a, b in pairs:
        torch.testing.assert_close(a["logical_count"], b["logical_count"] * attn_tp_size,
                                   rtol=0, atol=0)


MULTI_RANK = [
    (2, Setup("stat", buffer_size=5)),
    (4, Setup("stat", buffer_size=-1)),
    (4, Setup("stat", buffer_size=4, moe_a2a_backend="deepep", deepep_mode="low_latency")),
    (2, Setup("stat_approx", buffer_size=3, moe_a2a_backend="deepep", deepep_mode="normal")),
    (2, Setup("per_pass")),
    (4, Setup("per_token")),
    (4, Setup("stat", buffer_size=6, report_mode="both", threshold=0.9)),
]


# Ranks over gloo run on the CPU alone: the CPU suite (ctest) runs them, and the GPU machine's
# suite (tests/engines/run_gpu_tests.sh sets MOESTAT_GPU_SUITE) says so instead of repeating them.
cpu_ranks = pytest.mark.skipif(
    os.environ.get("MOESTAT_GPU_SUITE") == "1",
    reason="gloo ranks on the CPU only: the CPU suite runs them, not the GPU machine's")


@cpu_ranks
@pytest.mark.parametrize("world_size,setup", MULTI_RANK,
                         ids=[f"{w}ranks-{setup_id(s)}" for w, s in MULTI_RANK])
def test_ranks_over_gloo_dump_what_sglang_dumps(world_size, setup, tmp_path):
    torch.multiprocessing.spawn(
        _rank_main, args=(world_size, tmp_path / "store", setup, 11, tmp_path, 1, False),
        nprocs=world_size)


@cpu_ranks
def test_tensor_parallel_ranks_count_their_shared_tokens_once(tmp_path):
    setup = Setup("stat", buffer_size=4, num_physical=8)
    torch.multiprocessing.spawn(
        _rank_main, args=(2, tmp_path / "store", setup, 11, tmp_path, 2, True), nprocs=2)


@pytest.mark.parametrize("buffer_size", [3, -1])
def test_an_empty_recording_dumps_what_sglang_dumps(buffer_size, sglang_recorder_module,
                                                   single_process_group):
    module, config = sglang_recorder_module
    setup = Setup("stat", buffer_size=buffer_size)
    setup.configure(config)
    metadata = sglang_harness.make_metadata(setup.num_layers, setup.num_logical,
                                            setup.num_physical, 1)
    dumps = []
    for recorder in (module.ExpertDistributionRecorder.init_new(metadata, rank=0),
                     moestat.sglang.ExpertDistributionRecorder.init_new(metadata, rank=0)):
        recorder.start_record()
        dumps.append(recorder.dump_record("object"))
    sglang_scenarios.assert_same_dump(*dumps)
    assert dumps[1]["logical_count"].shape[0] == max(buffer_size, 0)


# ---- an engine tensor on a GPU, on a machine without one ----
#
# SGLang keeps last_physical_to_logical_map (and a stat dump's logical_count) on its GPU, and
# torch.save records each storage's location ("cuda:0"); torch.load puts it back there.
# moestat's C++ writer must write the same location. Without a GPU: the map is a CPU tensor
# that says it is on cuda:0 (a subclass), and torch.save tags its storage "cuda:0" (a
# serialization tagger ahead of torch's own) -- what torch.save records for a CUDA tensor.

_TAGGED = {}  # storage data_ptr -> (the location torch.save records for it, its tensor)


def _tag(storage):
    tagged = _TAGGED.get(storage.data_ptr())
    return tagged[0] if tagged else None


@pytest.fixture
def tagging():
    """_TAGGED, emptied after the test: a later tensor at a tagged address stays untagged."""
    yield _TAGGED
    _TAGGED.clear()


torch.serialization.register_package(0, _tag, lambda storage, location: None)


class _SaysCuda(torch.Tensor):
    """A CPU tensor whose ``device`` says cuda:0 (what SGLang's GPU map says)."""

    @property
    def device(self):
        return torch.device("cuda", 0)


def _on_fake_gpu(tensor):
    _TAGGED[tensor.untyped_storage().data_ptr()] = ("cuda:0", tensor)  # kept alive while tagged
    return tensor.as_subclass(_SaysCuda)


def _storages_of(path):
    """(storage class, location, elements) of each storage a .pt file's pickle names, in order
    (torch.load's persistent ids: ("storage", class, key, location, numel))."""
    import io
    import pickle
    import zipfile

    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
        pickled = archive.read(name)
    found = []

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if module == "torch" and name.endswith("Storage"):
                return name
            if module == "collections":
                return super().find_class(module, name)
            return lambda *args: None  # torch's rebuild functions: only storages matter here

        def persistent_load(self, pid):
            found.append((pid[1], pid[3], pid[4]))

    Unpickler(io.BytesIO(pickled)).load()
    return found


def _plain(value):
    """``value`` with _SaysCuda tensors as the plain CPU tensors they are (SGLang's torch.save
    pickles the subclass; the locations are compared through _storages_of)."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(item) for item in value)
    return value.as_subclass(torch.Tensor) if isinstance(value, torch.Tensor) else value


def _load_on_host(directory):
    files = sorted(directory.glob("expert_distribution_recorder_*.pt"),
                   key=lambda p: float(p.name.split("_")[3].removesuffix(".pt")))
    return [(path.name, _plain(torch.load(path, map_location="cpu", weights_only=False)))
            for path in files]


@pytest.mark.parametrize("setup", [Setup("per_pass"), Setup("per_token")], ids=setup_id)
def test_detail_dumps_keep_the_maps_gpu_as_torch_save_does(setup, sglang_recorder_module,
                                                           single_process_group, tmp_path,
                                                           monkeypatch, tagging):
    module, config = sglang_recorder_module
    make_metadata = sglang_harness.make_metadata

    def metadata_on_gpu(*args, **kwargs):
        metadata = make_metadata(*args, **kwargs)
        metadata.physical_to_logical_map = _on_fake_gpu(metadata.physical_to_logical_map)
        return metadata

    monkeypatch.setattr(sglang_harness, "make_metadata", metadata_on_gpu)
    monkeypatch.setattr(sglang_scenarios, "load_dumps", _load_on_host)
    drivers, files = run_differential(dataclasses.replace(setup), module, config, 3, tmp_path)
    assert files[0], "the scenario wrote no dump: nothing compared"
    assert_dumps_match(setup, drivers, files)
    for (name, _), (ours, _) in zip(*files):
        theirs = _storages_of(tmp_path / "sglang" / name)
        mine = _storages_of(tmp_path / "moestat" / ours)
        assert mine == theirs
        assert theirs[-1] == ("LongStorage", "cuda:0", setup.num_layers * setup.num_physical)
        assert all(location == "cpu" for _, location, _ in theirs[:-1])


@pytest.mark.parametrize("device", ["cuda:0", "cuda:3", "cpu"])
def test_a_stat_dump_keeps_logical_counts_device_as_torch_save_does(device, tmp_path, tagging):
    counts = torch.arange(2 * 3 * 4, dtype=torch.int32).reshape(2, 3, 4)
    dump = dict(rank=0, logical_count=counts.clone(), average_utilization_rate_over_window=0.75,
                eplb_balancedness=torch.tensor([0.5, 0.25], dtype=torch.float32))
    tagging[dump["logical_count"].untyped_storage().data_ptr()] = (device, dump["logical_count"])
    torch.save(dump, tmp_path / "torch.pt")
    (tmp_path / "moestat.pt").write_bytes(moestat._core.sglang_stat_dump_bytes(
        counts, 0, average_utilization=0.75, device=device, eplb_balancedness=[0.5, 0.25]))
    assert _storages_of(tmp_path / "moestat.pt") == _storages_of(tmp_path / "torch.pt") == [
        ("IntStorage", device, 24), ("FloatStorage", "cpu", 2)]
    sglang_scenarios.assert_same_dump(torch.load(tmp_path / "torch.pt", map_location="cpu"),
                                      torch.load(tmp_path / "moestat.pt", map_location="cpu"))
    with pytest.raises(moestat.Error, match="device or storage location \"gpu\" is not supported"):
        moestat._core.sglang_stat_dump_bytes(counts, device="gpu")
