"""Files through Python: every format round-trips, SGLang dumps read back, bad files fail."""
import numpy as np
import pytest

import moestat
from conftest import random_topk


@pytest.mark.parametrize("extension", [".pt", ".json", ".safetensors"])
def test_logical_counts_round_trip(tmp_path, rng, extension):
    counts = rng.integers(0, 1000, size=(3, 4, 8))
    path = tmp_path / f"counts{extension}"
    moestat.write_logical_counts(path, counts)
    np.testing.assert_array_equal(moestat.read_logical_counts(path), counts)
    moestat.write_logical_counts(path, counts[0])
    np.testing.assert_array_equal(moestat.read_logical_counts(path), counts[0])


@pytest.mark.parametrize("extension", [".pt", ".json", ".safetensors"])
def test_placement_round_trip(tmp_path, extension):
    placement = moestat.Placement(np.array([[0, 1, 2, 0], [2, 1, 0, 1]]))
    path = tmp_path / f"placement{extension}"
    moestat.write_placement(path, placement)
    again = moestat.read_placement(path)
    np.testing.assert_array_equal(again.physical_to_logical, placement.physical_to_logical)
    assert moestat.file_format(path) == extension[1:]
    # the shape a model takes, required: this one, or any (0) in either dimension
    for layers, slots in ((2, 4), (0, 4), (2, 0)):
        shaped = moestat.read_placement(path, num_layers=layers, num_physical_experts=slots)
        np.testing.assert_array_equal(shaped.physical_to_logical, placement.physical_to_logical)
    message = (r"physical_to_logical_map\[0\] has more than 3 entries, expected 3 \(physical slots\)"
               if extension == ".json" else
               r"physical_to_logical_map is \[2, 4\], expected \[2, 3\]")
    with pytest.raises(moestat.Error, match=message):
        moestat.read_placement(path, num_layers=2, num_physical_experts=3)


def test_sglang_dump_of_a_recording_reads_back(tmp_path, rng):
    topology = moestat.ModelTopology.uniform(num_layers=2, num_experts=8, top_k=2)
    recorder = moestat.CpuRecorder(topology, mode="per_pass")
    recorder.start()
    for pass_id in range(3):
        recorder.begin_pass(pass_id)
        recorder.record_topk(0, random_topk(rng, 10, 8, 2))
        recorder.record_topk(1, random_topk(rng, 10, 8, 2))
        recorder.end_pass()
    snapshot = recorder.snapshot()
    path = moestat.write_sglang_dump(snapshot, moestat.Placement.trivial(2, 8, 8), rank=0,
                                     directory=tmp_path)
    assert path.parent == tmp_path and path.name.startswith("expert_distribution_recorder_")
    np.testing.assert_array_equal(moestat.read_logical_counts(path), snapshot.logical_counts)
    # The per-pass dump's records keep their pass ids; its stat form keeps none.
    counts = moestat.read_counts(path)
    assert counts["has_window_axis"]
    np.testing.assert_array_equal(counts["counts"], snapshot.logical_counts)
    np.testing.assert_array_equal(counts["pass_ids"], [0, 1, 2])
    assert counts["placement_versions"] is None and counts["pass_num_tokens"] is None


def per_token_snapshot(rng):
    topology = moestat.ModelTopology.uniform(num_layers=2, num_experts=8, top_k=2)
    recorder = moestat.CpuRecorder(topology, mode="per_token")
    recorder.start()
    for pass_id in (4, 5):
        recorder.begin_pass(pass_id)
        recorder.record_topk(0, random_topk(rng, 3, 8, 2))
        recorder.record_topk(1, random_topk(rng, 3, 8, 2))
        recorder.end_pass()
    return recorder.snapshot()


def test_sglang_dump_with_the_engines_pass_records(tmp_path, rng):
    """The adapter's pass records make each record what SGLang's recorder writes (its
    forward_pass_id, the batch's metadata, misc_objects; test_sglang_differential compares the
    whole file with SGLang's); the counts read back are the kept tokens'."""
    snapshot = per_token_snapshot(rng)
    metadata = {"input_ids": [7, 8, 9, 10], "positions": [0, 1, 2, 3], "extend_seq_lens": None,
                "forward_mode": 1}
    misc = [{"layer_id": 0, "num_tokens_per_rank": [3], "num_tokens_per_rdma_rank": None}]
    passes = {5: dict(forward_pass_id=11, metadata=metadata, misc_objects=misc),
              4: dict(forward_pass_id=10, metadata=dict(metadata, input_ids=[1, 2, 3]),
                      misc_objects=[])}
    path = moestat.write_sglang_dump(snapshot, moestat.Placement.trivial(2, 8, 8),
                                     directory=tmp_path, passes=passes)
    counts = moestat.read_counts(path)
    np.testing.assert_array_equal(counts["pass_ids"], [10, 11])
    totals = np.zeros((2, 8), dtype=np.int64)  # every kept token's ids, once each
    for ids in snapshot.token_physical_ids.reshape(-1, 2, 2):
        for layer in range(2):
            np.add.at(totals[layer], ids[layer][ids[layer] >= 0], 1)
    np.testing.assert_array_equal(counts["counts"].sum(axis=0), totals)


@pytest.mark.parametrize("passes, error, message", [
    ({4: {"forward_pass_id": 1, "metadata": {"input_ids": [np.int64(1)]}}}, TypeError,
     "metadata must be None, bool, int, float, str, list, tuple or dict, got numpy"),
    ({4: {"forward_pass_id": 1, "metadata": {(1, 2): 3}}}, TypeError,
     "metadata must be a dict with str or int keys, got tuple"),
    ({4: {"metadata": None}}, moestat.Error, "the record of pass 4 has no forward_pass_id"),
    ({4: {"forward_pass_id": 1, "misc_objects": ()}}, TypeError, "misc_objects must be a list"),
    ({4: 1}, TypeError, "passes must be a dict per pass, got int"),
    ([], TypeError, "passes must be a dict of pass records or None, got list"),
])
def test_sglang_dump_pass_records_of_the_wrong_kind_are_refused(tmp_path, rng, passes, error,
                                                                 message):
    with pytest.raises(error, match=message):
        moestat.write_sglang_dump(per_token_snapshot(rng), moestat.Placement.trivial(2, 8, 8),
                                  directory=tmp_path, passes=passes)
    assert not list(tmp_path.iterdir())


def test_sglang_dump_metadata_nested_too_deep_is_refused(tmp_path, rng):
    deep = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(moestat.Error, match="metadata is nested deeper than 64"):
        moestat.write_sglang_dump(per_token_snapshot(rng), moestat.Placement.trivial(2, 8, 8),
                                  directory=tmp_path,
                                  passes={4: {"forward_pass_id": 1, "metadata": {"x": deep}}})


def test_counts_json_carries_an_engines_metadata_after_the_counts(tmp_path):
    """What vLLM's offline path writes: {"logical_count": ..., "vllm_eplb": {...}}."""
    import json

    counts = np.array([[1, 2], [3, 4]])
    metadata = {"what": "a \"window\"", "num_ranks": 2, "pp_rank": None}
    path = tmp_path / "load.json"
    moestat.write_logical_counts(path, counts, metadata=json.dumps({"vllm_eplb": metadata}))
    document = json.loads(path.read_text())
    assert list(document) == ["logical_count", "vllm_eplb"]
    assert document["logical_count"] == counts.tolist() and document["vllm_eplb"] == metadata
    np.testing.assert_array_equal(moestat.read_logical_counts(path), counts)
    with pytest.raises(moestat.Error, match="counts metadata is written only to a .json file"):
        moestat.write_logical_counts(tmp_path / "load.pt", counts, metadata="{}")
    with pytest.raises(moestat.Error, match="expected a JSON object, got array"):
        moestat.write_logical_counts(path, counts, metadata="[]")
    with pytest.raises(TypeError, match="metadata must be a str or None, got dict"):
        moestat.write_logical_counts(path, counts, metadata={})
    assert not (tmp_path / "load.pt").exists()


def test_fractional_loads_are_read_only_when_asked_for(tmp_path):
    path = tmp_path / "popularity.json"
    path.write_text('{"expert_popularity": [[1.5, 2], [0, 0.25]]}')
    with pytest.raises(moestat.Error, match=r"expert_popularity\[0\]\[0\] is 1.5"):
        moestat.read_logical_counts(path)
    counts = moestat.read_counts(path, fractions=True)
    assert counts["counts"].dtype == np.float64
    np.testing.assert_array_equal(counts["counts"], [[1.5, 2], [0, 0.25]])
    assert not counts["has_window_axis"]


def test_malformed_and_missing_files_name_the_path(tmp_path):
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(moestat.Error, match="broken.pt"):
        moestat.read_logical_counts(broken)
    with pytest.raises(moestat.Error, match="missing.json"):
        moestat.read_logical_counts(tmp_path / "missing.json")
    with pytest.raises(moestat.Error, match="not a non-negative integer"):
        moestat.write_logical_counts(tmp_path / "c.json", np.array([[1.5, 2.0]]))
    for huge in (1e30, np.nan):
        with pytest.raises(moestat.Error, match="not a non-negative integer"):
            moestat.write_logical_counts(tmp_path / "c.json", np.array([[huge, 2.0]]))
    with pytest.raises(moestat.Error):
        moestat.write_logical_counts(tmp_path / "no-such-dir" / "c.pt", np.ones((2, 2), dtype=np.int64))
    assert not (tmp_path / "c.json").exists()
