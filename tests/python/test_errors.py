"""Wrong-type arguments raise a TypeError naming the function, the argument and what it takes
(issue 14, item 14), never nanobind's "incompatible function arguments ... Invoked with types";
calls that worked before still work (numpy scalars, pathlib paths), and numpy bool arrays
are taken as moe_layers."""
import pathlib

import numpy as np
import pytest

import moestat

TOPOLOGY = moestat.ModelTopology.uniform(num_layers=2, num_experts=8, top_k=2)
IDS = np.array([[0, 1], [2, 3]], dtype=np.int32)
ARRAY = r"must be an array \(numpy, torch or any DLPack/buffer-protocol object\)"


def raises_naming(pattern):
    """pytest.raises(TypeError) whose message matches `pattern` (which names the argument)."""
    return pytest.raises(TypeError, match=pattern)


def check_message(info):
    message = str(info.value)
    assert "incompatible function arguments" not in message and "Invoked with" not in message


@pytest.fixture
def recorder():
    recorder = moestat.CpuRecorder(TOPOLOGY)
    recorder.start()
    recorder.begin_pass(0)
    return recorder


@pytest.mark.parametrize("ids, got", [([[0, 1], [2, 3]], "list"), (1.5, "float"), (None, "None"),
                                      ("0 1", "str")])
def test_record_topk_ids_not_an_array(recorder, ids, got):
    with raises_naming(rf"^record_topk: topk_ids {ARRAY} of int32/int64 physical expert ids, "
                       rf"got {got}$") as info:
        recorder.record_topk(0, ids)
    check_message(info)


@pytest.mark.parametrize("valid, got", [("3", "str"), (2.5, "float"), ([1], "list")])
def test_record_topk_num_valid_tokens_of_a_wrong_type(recorder, valid, got):
    with raises_naming(r"^record_topk: num_valid_tokens must be None, an int or an array .* "
                       rf"holding one int32/int64 count, got {got}$") as info:
        recorder.record_topk(0, IDS, num_valid_tokens=valid)
    check_message(info)


def test_record_topk_layer_of_a_wrong_type(recorder):
    with raises_naming(r"^record_topk: layer must be an int, got str$"):
        recorder.record_topk("0", IDS)
    with raises_naming(r"^record_topk: layer must be an int, got float$"):
        recorder.record_topk(0.0, IDS)
    with raises_naming(r"^record_topk: layer must be an int from -2\*\*63 to 2\*\*63 - 1, "
                       r"got 1237940039285380274899124224$"):
        recorder.record_topk(2**90, IDS)


def test_record_topk_layers_names_the_element(recorder):
    with raises_naming(rf"^record_topk_layers: topk_ids\[1\] {ARRAY} of int32/int64 physical "
                       r"expert ids, got list$") as info:
        recorder.record_topk_layers([0, 1], [IDS, [[0, 1]]])
    check_message(info)
    with raises_naming(r"^record_topk_layers: topk_ids must be a sequence of arrays of "
                       r"int32/int64 physical expert ids, one per layer, got float$"):
        recorder.record_topk_layers([0], 1.5)
    with raises_naming(r"^record_topk_layers: layers\[1\] must be an int, got str$"):
        recorder.record_topk_layers([0, "1"], [IDS, IDS])
    with raises_naming(r"^record_topk_layers: layers must be a sequence of ints \(layer indices\), "
                       r"got int$"):
        recorder.record_topk_layers(0, [IDS])
    with raises_naming(r"^record_topk_layers: num_valid_tokens must be None, an int or .*, "
                       r"got str$"):
        recorder.record_topk_layers([0], [IDS], num_valid_tokens="2")


def test_record_local_counts_arguments():
    recorder = moestat.CpuRecorder(TOPOLOGY, mode="stat_approx")
    recorder.start()
    recorder.begin_pass(0)
    with raises_naming(rf"^record_local_counts: counts {ARRAY} of int32/int64 per-local-expert "
                       r"counts, got list$") as info:
        recorder.record_local_counts(0, [1] * 8, 0)
    check_message(info)
    with raises_naming(r"^record_local_counts: rank must be an int, got None$"):
        recorder.record_local_counts(0, np.ones(8, dtype=np.int64), None)
    with raises_naming(r"^record_local_counts: layer must be an int, got str$"):
        recorder.record_local_counts("0", np.ones(8, dtype=np.int64), 0)


def test_hooks_take_what_they_took_before(recorder):
    recorder.record_topk(np.int64(0), IDS, num_valid_tokens=np.int64(1))
    recorder.record_topk(layer=1, topk_ids=IDS, num_valid_tokens=np.array([2], dtype=np.int32))
    recorder.record_topk_layers((0, np.int32(1)), (IDS, IDS.astype(np.int64)), num_valid_tokens=1)
    recorder.record_topk_layers([0, 1], np.stack([IDS, IDS]))  # an [L, T, k] array is a sequence
    with pytest.raises(moestat.Error, match="topk_ids"):  # an array of a wrong dtype: as before
        recorder.record_topk(0, IDS.astype(np.float64))
    recorder.end_pass()
    # Layer 0: 1 + 1 + 2 tokens, layer 1: 2 + 1 + 2 tokens, each with top_k = 2 ids.
    np.testing.assert_array_equal(recorder.snapshot().logical_totals().sum(axis=1), [8, 10])


def test_model_topology_arguments():
    with raises_naming(r"^ModelTopology: num_layers must be an int, got str$") as info:
        moestat.ModelTopology("2", 8, 2)
    check_message(info)
    with raises_naming(r"^ModelTopology: ep_size must be an int, got float$"):
        moestat.ModelTopology(2, 8, 2, ep_size=1.5)
    with raises_naming(r"^ModelTopology: num_physical_experts must be an int, got str$"):
        moestat.ModelTopology(2, 8, 2, num_physical_experts="8")
    with raises_naming(r"^ModelTopology: moe_layers\[1\] must be a bool, got str$"):
        moestat.ModelTopology(2, 8, 2, moe_layers=[True, "yes"])
    with raises_naming(r"^ModelTopology: moe_layers must be None or a sequence of bools, one per "
                       r"layer, got int$"):
        moestat.ModelTopology(2, 8, 2, moe_layers=3)
    # numpy ints as before; numpy bools (a bool array) are taken too.
    topology = moestat.ModelTopology(np.int64(2), 8, 2, moe_layers=np.array([False, True]))
    assert topology.moe_layers == [False, True] and topology.num_physical_experts == 8
    with pytest.raises(moestat.Error):  # a wrong value, not type: moestat.Error as before
        moestat.ModelTopology(-1, 8, 2)


def test_recorder_constructor_arguments():
    with raises_naming(r"^CpuRecorder: topology must be a moestat.ModelTopology "
                       r"\(moestat.ModelTopology\(num_layers, num_experts, top_k, ...\)\), "
                       r"got tuple$") as info:
        moestat.CpuRecorder((2, 8, 2))
    check_message(info)
    with raises_naming(r"^CpuRecorder: mode must be a str \('stat', .*\), got int$"):
        moestat.CpuRecorder(TOPOLOGY, mode=3)
    with raises_naming(r"^CpuRecorder: decay must be a float, got str$"):
        moestat.CpuRecorder(TOPOLOGY, mode="decayed", decay="0.9")
    with raises_naming(r"^CpuRecorder: window_size must be an int, got float$"):
        moestat.CpuRecorder(TOPOLOGY, window_size=10.0)
    assert moestat.CpuRecorder(TOPOLOGY, mode="decayed", decay=1, window_size=np.int32(5))


@pytest.mark.skipif(not moestat.has_cuda, reason="a build without the CUDA recorder")
def test_cuda_recorder_constructor_arguments():
    # Checked before any CUDA call, so these hold with or without a GPU.
    with raises_naming(r"^CudaRecorder: topology must be a moestat.ModelTopology .*, got None$"):
        moestat.CudaRecorder(None)
    with raises_naming(r"^CudaRecorder: device must be an int, got str$"):
        moestat.CudaRecorder(TOPOLOGY, device="cuda:0")
    with raises_naming(r"^CudaRecorder: trace_path must be a str or os.PathLike, got int$"):
        moestat.CudaRecorder(TOPOLOGY, mode="per_token", trace_path=5)
    # Without trace_path, per_token mode is refused (the default was once Path('.')).
    with pytest.raises(moestat.Error, match="per_token mode on the CUDA recorder needs"):
        moestat.CudaRecorder(TOPOLOGY, mode="per_token")


def test_placement_arguments(recorder):
    with raises_naming(rf"^Placement: physical_to_logical {ARRAY} of integer expert ids, "
                       r"\[layers, slots\], got list$") as info:
        moestat.Placement([[0, 1, 2, 3, 4, 5, 6, 7]] * 2)
    check_message(info)
    phy2log = np.tile(np.arange(8), (2, 1))
    with raises_naming(r"^Placement: version must be an int from 0 to 2\*\*64 - 1, got -1$"):
        moestat.Placement(phy2log, version=-1)
    with raises_naming(r"^Placement: num_logical_experts must be an int, got float$"):
        moestat.Placement(phy2log, num_logical_experts=8.0)
    assert moestat.Placement(phy2log, version=np.uint64(3)).version == 3

    with raises_naming(r"^set_placement: placement must be a moestat.Placement "
                       r"\(moestat.Placement\(physical_to_logical, version=n\)\), "
                       r"got numpy.ndarray$") as info:
        recorder.set_placement(phy2log)
    check_message(info)
    with raises_naming(r"^set_placement: placement must be a moestat.Placement .*, got None$"):
        recorder.set_placement(None)
    recorder.set_placement(moestat.Placement(phy2log, version=1))


@pytest.mark.parametrize("name, call", [
    ("file_format", lambda path: moestat.file_format(path)),
    ("read_counts", lambda path: moestat.read_counts(path)),
    ("read_logical_counts", lambda path: moestat.read_logical_counts(path)),
    ("write_logical_counts", lambda path: moestat.write_logical_counts(path, np.ones((2, 8)))),
    ("read_placement", lambda path: moestat.read_placement(path)),
    ("write_placement", lambda path: moestat.write_placement(path, moestat.Placement.trivial(2, 8, 8))),
])
@pytest.mark.parametrize("path, got", [(3, "int"), (None, "None"), ([b"a"], "list")])
def test_file_functions_given_a_non_path(name, call, path, got):
    with raises_naming(rf"^{name}: path must be a str or os.PathLike, got {got}$") as info:
        call(path)
    check_message(info)


def test_file_functions_other_arguments(tmp_path):
    with raises_naming(rf"^write_logical_counts: counts {ARRAY} of \[layers, experts\] or "
                       r"\[passes, layers, experts\] counts, got list$"):
        moestat.write_logical_counts(tmp_path / "c.json", [[1, 2]])
    with raises_naming(r"^read_counts: fractions must be a bool, got str$"):
        moestat.read_counts(tmp_path / "c.json", fractions="yes")
    with raises_naming(r"^write_placement: placement must be a moestat.Placement, got str$"):
        moestat.write_placement(tmp_path / "p.json", "placement")
    with raises_naming(r"^read_placement: version must be an int from 0 to 2\*\*64 - 1, got -2$"):
        moestat.read_placement(tmp_path / "p.json", version=-2)
    with raises_naming(r"^read_placement: num_layers must be an int"):
        moestat.read_placement(tmp_path / "p.json", num_layers="58")
    with pytest.raises(moestat.Error, match=r"the shape required is \[2, -1\], expected sizes"):
        moestat.read_placement(tmp_path / "p.json", num_layers=2, num_physical_experts=-1)
    placement = moestat.Placement.trivial(2, 8, 8)
    with raises_naming(r"^write_sglang_dump: snapshot must be a moestat.Snapshot, got dict$"):
        moestat.write_sglang_dump({}, placement)
    snapshot = moestat.CpuRecorder(TOPOLOGY).snapshot()
    with raises_naming(r"^write_sglang_dump: directory must be a str or os.PathLike, got int$"):
        moestat.write_sglang_dump(snapshot, placement, directory=7)
    with raises_naming(r"^write_sglang_dump: rank must be an int, got str$"):
        moestat.write_sglang_dump(snapshot, placement, rank="0", directory=tmp_path)
    assert not list(tmp_path.iterdir())
    # str and pathlib paths work as before.
    moestat.write_logical_counts(str(tmp_path / "c.json"), np.ones((2, 8), dtype=np.int64))
    assert moestat.file_format(pathlib.Path(tmp_path / "c.json")) == "json"


def test_sglang_dump_without_a_directory_goes_where_sglang_puts_it(tmp_path, monkeypatch):
    # The default directory was once Path('.') (the working directory) instead of
    # $SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR.
    monkeypatch.setenv("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR", str(tmp_path / "dumps"))
    (tmp_path / "dumps").mkdir()
    monkeypatch.chdir(tmp_path)
    recorder = moestat.CpuRecorder(TOPOLOGY)
    recorder.start()
    recorder.begin_pass(0)
    recorder.end_pass()
    path = moestat.write_sglang_dump(recorder.snapshot(), moestat.Placement.trivial(2, 8, 8))
    assert pathlib.Path(path).parent == tmp_path / "dumps"
    assert [entry.name for entry in tmp_path.iterdir()] == ["dumps"]


def test_stub_signatures_stay_typed():
    """The functions take objects to name wrong arguments, but say what they take."""
    assert "topk_ids: ndarray[writable=False]" in moestat.CpuRecorder.record_topk.__doc__
    assert "placement: moestat._core.Placement" in moestat.CpuRecorder.set_placement.__doc__
    assert "path: str | os.PathLike" in moestat.read_logical_counts.__doc__

