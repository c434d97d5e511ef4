"""Where moestat.sglang deliberately differs from SGLang's recorder, each difference asserted
against SGLang's real code (docs/sglang.md, "What differs")."""

import logging

import numpy as np
import pytest
import torch

import sglang_harness
from sglang_scenarios import Setup

import moestat.sglang


def make_pair(module, config, setup, *, rank=0, ep_size=1, phy2log=None):
    setup.configure(config)
    metadata = sglang_harness.make_metadata(setup.num_layers, setup.num_logical,
                                            setup.num_physical, ep_size,
                                            physical_to_logical_map=phy2log)
    theirs = module.ExpertDistributionRecorder.init_new(metadata, rank=rank)
    ours = moestat.sglang.ExpertDistributionRecorder.init_new(metadata, rank=rank)
    return metadata, theirs, ours


def batch(num_tokens):
    return sglang_harness.make_forward_batch(num_tokens, "decode")


def test_no_mode_gives_sglangs_noop_recorder(sglang_recorder_module):
    module, config = sglang_recorder_module
    _, theirs, ours = make_pair(module, config, Setup(mode=None))
    assert isinstance(ours, moestat.sglang.NoopExpertDistributionRecorder)
    with ours.with_forward_pass(0, batch(2)) as outputs, ours.with_current_layer(0):
        ours.on_select_experts(torch.zeros(2, 2, dtype=torch.int32))
        assert ours.get_current_pass_count_buffer(0) is None
    assert outputs == {} and ours.recording is False
    for call in ("start_record", "stop_record", "dump_record"):
        with pytest.raises(Exception) as their_error:
            getattr(theirs, call)()
        with pytest.raises(Exception) as our_error:
            getattr(ours, call)()
        assert str(our_error.value) == str(their_error.value)


def test_a_topk_hook_without_a_layer_is_a_counted_fault_not_a_crash(
        sglang_recorder_module, single_process_group, caplog):
    module, config = sglang_recorder_module
    _, theirs, ours = make_pair(module, config, Setup("stat", buffer_size=2))
    ids = torch.tensor([[0, 1], [2, 3]])
    theirs.start_record()
    ours.start_record()
    with theirs.with_forward_pass(0, batch(2)):
        with pytest.raises(Exception):  # SGLang: a scatter into _data[None] fails
            theirs.on_select_experts(ids)
    with caplog.at_level(logging.ERROR, logger="moestat.sglang.recorder"):
        with ours.with_forward_pass(0, batch(2)):
            ours.on_select_experts(ids)
            ours.on_select_experts(ids)
    assert ours.faults == {"on_select_experts_without_layer": 2}
    assert sum("outside with_current_layer" in r.message for r in caplog.records) == 1  # once
    assert ours.dump_record("object")["logical_count"].sum() == 0


def test_a_low_latency_hook_without_a_layer_is_not_added_to_every_layer(
        sglang_recorder_module, single_process_group):
    module, config = sglang_recorder_module
    setup = Setup("stat", buffer_size=2, moe_a2a_backend="deepep", deepep_mode="low_latency")
    _, theirs, ours = make_pair(module, config, setup)
    masked_m = torch.arange(setup.num_physical, dtype=torch.int32)
    for recorder in (theirs, ours):
        recorder.start_record()
        with recorder.with_forward_pass(0, batch(4)):
            recorder.on_deepep_dispatch_low_latency(masked_m)
    their_counts = theirs.dump_record("object")["logical_count"]
    # SGLang: _data[None, :] += masked_m broadcasts the rank's counts into every layer.
    assert (their_counts.sum(dim=(0, 2)) == masked_m.sum()).all()
    assert ours.dump_record("object")["logical_count"].sum() == 0
    assert ours.faults == {"on_deepep_dispatch_low_latency_without_layer": 1}


def test_a_layer_out_of_range_is_a_counted_fault(sglang_recorder_module, single_process_group):
    module, config = sglang_recorder_module
    setup = Setup("stat", buffer_size=2)
    _, theirs, ours = make_pair(module, config, setup)
    ids = torch.tensor([[0, 1]])
    theirs.start_record()
    ours.start_record()
    with theirs.with_forward_pass(0, batch(1)), theirs.with_current_layer(setup.num_layers):
        with pytest.raises(IndexError):
            theirs.on_select_experts(ids)
    with ours.with_forward_pass(0, batch(1)), ours.with_current_layer(setup.num_layers):
        ours.on_select_experts(ids)
    assert ours.faults == {"on_select_experts_layer_out_of_range": 1}


@pytest.mark.parametrize("layer", ["2", 1.9, True])
def test_a_layer_that_is_not_an_integer_is_a_counted_fault(layer, sglang_recorder_module,
                                                           single_process_group):
    module, config = sglang_recorder_module
    _, _, ours = make_pair(module, config, Setup("stat", buffer_size=2))
    ours.start_record()
    with ours.with_forward_pass(0, batch(1)), ours.with_current_layer(layer):
        ours.on_select_experts(torch.tensor([[0, 1]]))
        assert ours.get_current_pass_count_buffer(layer) is None
    assert ours.faults == {"on_select_experts_layer_not_an_index": 1,
                           "get_current_pass_count_buffer": 1}
    assert ours.dump_record("object")["logical_count"].sum() == 0


def test_each_pass_keeps_the_placement_it_ran_with(sglang_recorder_module, single_process_group):
    """SGLang converts the whole window with the map current at dump time."""
    module, config = sglang_recorder_module
    setup = Setup("stat", buffer_size=4, num_layers=1, num_logical=4, num_physical=4)
    metadata, theirs, ours = make_pair(module, config, setup)
    ids = torch.tensor([[0, 1], [0, 2]])  # slots
    before = metadata.physical_to_logical_map.clone()
    after = torch.tensor([[3, 2, 1, 0]])
    for recorder in (theirs, ours):
        recorder.start_record()
    for step in range(4):
        if step == 2:
            metadata.physical_to_logical_map[...] = after  # SGLang's in-place update
        for recorder in (theirs, ours):
            with recorder.with_forward_pass(step, batch(2)), recorder.with_current_layer(0):
                recorder.on_select_experts(ids)
    slot_counts = torch.bincount(ids.reshape(-1), minlength=4)

    def logical(mapping):
        return torch.zeros(4, dtype=torch.int64).index_add_(0, mapping[0], slot_counts)

    their_counts = theirs.dump_record("object")["logical_count"][:, 0]
    our_counts = ours.dump_record("object")["logical_count"][:, 0]
    for step in range(4):
        assert their_counts[step].tolist() == logical(after).tolist()
        expected = logical(before if step < 2 else after)
        assert our_counts[step].tolist() == expected.tolist()


def test_per_pass_dumps_also_return_an_object(sglang_recorder_module, single_process_group,
                                              tmp_path, monkeypatch):
    module, config = sglang_recorder_module
    _, theirs, ours = make_pair(module, config, Setup("per_pass"))
    monkeypatch.setenv("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR", str(tmp_path))
    ids = torch.tensor([[1, 2], [3, -1]])
    for recorder in (theirs, ours):
        recorder.start_record()
        with recorder.with_forward_pass(7, batch(2)), recorder.with_current_layer(1):
            recorder.on_select_experts(ids)
    with pytest.raises(AssertionError):
        theirs.dump_record("object")
    dump = ours.dump_record("object")
    assert [r["forward_pass_id"] for r in dump["records"]] == [7]
    assert dump["records"][0]["global_physical_count"][1].tolist()[:4] == [0, 1, 1, 1]
    assert not list(tmp_path.iterdir())  # an object dump writes no file


def test_per_token_drops_ids_outside_the_slots(sglang_recorder_module, single_process_group,
                                               tmp_path, monkeypatch):
    module, config = sglang_recorder_module
    setup = Setup("per_token")
    _, theirs, ours = make_pair(module, config, setup)
    ids = torch.tensor([[1, setup.num_physical + 2]], dtype=torch.int32)  # a fused shared expert
    monkeypatch.setenv("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR", str(tmp_path))
    for recorder in (theirs, ours):
        recorder.start_record()
    with pytest.raises(RuntimeError):  # SGLang's scatter_add_ indexes past the slots
        with theirs.with_forward_pass(0, batch(1)), theirs.with_current_layer(0):
            theirs.on_select_experts(ids)
    with ours.with_forward_pass(0, batch(1)), ours.with_current_layer(0):
        ours.on_select_experts(ids)
    record = ours.dump_record("object")["records"][0]
    assert record["topk_ids_of_layer"][0, 0, :2].tolist() == [1, -1]
    assert record["global_physical_count"][0].sum() == 1


def test_stat_dumps_carry_each_passs_balancedness_when_it_is_reported(
        sglang_recorder_module, single_process_group):
    module, config = sglang_recorder_module
    setup = Setup("stat", buffer_size=3, report_mode="server_log", threshold=0.9,
                  num_layers=2, num_physical=8, num_logical=8)
    _, theirs, ours = make_pair(module, config, setup, ep_size=1)
    assert ours.recording  # SGLang starts recording when balancedness is reported
    passes = [torch.tensor([[0, 1], [2, 3]]), torch.tensor([[0, 0], [0, 1]])]
    for step, ids in enumerate(passes):
        with ours.with_forward_pass(step, batch(2)), ours.with_current_layer(1):
            ours.on_select_experts(ids)
    dump = ours.dump_record("object")
    # One GPU holds every slot: a single load per layer, so every layer scores 1.
    assert dump["eplb_balancedness"].tolist() == [1.0, 1.0]
    assert dump["average_utilization_rate_over_window"] == 1.0


def test_forward_passes_carry_no_per_pass_metrics(sglang_recorder_module, single_process_group):
    """SGLang reduces every pass's GPU loads across ranks to hand the model runner a metric;
    moestat adds no collective to a pass: the values come with the dump."""
    module, config = sglang_recorder_module
    setup = Setup("stat", buffer_size=2, report_mode="server_log", threshold=0.9)
    _, theirs, ours = make_pair(module, config, setup)
    ids = torch.tensor([[0, 1]])
    for recorder in (theirs, ours):
        with recorder.with_forward_pass(0, batch(1)) as outputs:
            with recorder.with_current_layer(0):
                recorder.on_select_experts(ids)
        if recorder is theirs:
            assert "metrics" in outputs
        else:
            assert outputs == {}
    assert ours.dump_record("object")["eplb_balancedness"].shape == (1,)


def test_a_fault_never_reaches_the_engine(sglang_recorder_module, single_process_group):
    module, config = sglang_recorder_module
    _, _, ours = make_pair(module, config, Setup("stat", buffer_size=2))
    ours.start_record()
    with ours.with_forward_pass(0, batch(2)), ours.with_current_layer(0):
        ours.on_select_experts(torch.zeros(2, 2, dtype=torch.float32))  # not integer ids
        ours.on_select_experts(torch.zeros(2, 2, 2, dtype=torch.int32))  # not [tokens, k]
    assert ours.faults == {"on_select_experts": 2}
    assert ours.dump_record("object")["logical_count"].sum() == 0


def test_nested_layers_are_allowed_where_sglang_asserts(sglang_recorder_module,
                                                        single_process_group):
    module, config = sglang_recorder_module
    _, theirs, ours = make_pair(module, config, Setup("stat", buffer_size=1))
    with pytest.raises(AssertionError):
        with theirs.with_current_layer(0), theirs.with_current_layer(1):
            pass
    ours.start_record()
    with ours.with_forward_pass(0, batch(1)), ours.with_current_layer(0):
        with ours.with_current_layer(1):
            ours.on_select_experts(torch.tensor([[4, 5]]))
        ours.on_select_experts(torch.tensor([[6, 7]]))
    counts = ours.dump_record("object")["logical_count"][0]
    assert counts[1].sum() == 2 and counts[0].sum() == 2


def test_settings_without_sglang_come_from_keywords():
    config = moestat.sglang.RecorderConfig(mode="stat", buffer_size=10)
    assert config.dump_has_utilization is False
    with pytest.raises(ValueError, match="mode"):
        moestat.sglang.RecorderConfig(mode="sampled")
    with pytest.raises(ValueError, match="buffer_size"):
        moestat.sglang.RecorderConfig(mode="stat", buffer_size=0)
    with pytest.raises(NotImplementedError, match="stat_approx"):
        moestat.sglang.MoestatExpertDistributionRecorder(
            moestat.sglang.ExpertLocation.trivial(2, 4), 0,
            moestat.sglang.RecorderConfig(mode="stat_approx"))


def test_a_map_made_in_inference_mode_is_still_followed(sglang_recorder_module,
                                                        single_process_group):
    """An inference tensor has no version counter: the recorder compares its contents."""
    module, config = sglang_recorder_module
    setup = Setup("stat", buffer_size=2, num_layers=1, num_logical=4, num_physical=4)
    with torch.inference_mode():
        phy2log = torch.arange(4).reshape(1, 4)
    _, _, ours = make_pair(module, config, setup, phy2log=phy2log)
    metadata_map = ours._metadata.physical_to_logical_map
    assert metadata_map.is_inference()
    ours.start_record()
    for step in range(2):
        if step == 1:
            with torch.inference_mode():
                metadata_map[...] = torch.tensor([[3, 2, 1, 0]])
        with ours.with_forward_pass(step, batch(1)), ours.with_current_layer(0):
            ours.on_select_experts(torch.tensor([[0, 1]]))
    counts = ours.dump_record("object")["logical_count"][:, 0]
    assert counts[0].tolist() == [1, 1, 0, 0] and counts[1].tolist() == [0, 0, 1, 1]
    assert ours.faults == {}


def test_a_forward_that_raises_is_discarded_not_committed(sglang_recorder_module,
                                                          single_process_group):
    module, config = sglang_recorder_module
    _, theirs, ours = make_pair(module, config, Setup("stat", buffer_size=4))
    passes = [torch.tensor([[0, 1], [2, 3]]), torch.tensor([[4, 5], [6, 7]]),
              torch.tensor([[1, 1], [3, 3]])]

    def forward(recorder, pass_id, ids, fail):
        with recorder.with_forward_pass(pass_id, batch(2)):
            with recorder.with_current_layer(1):
                recorder.on_select_experts(ids)
            if fail:
                raise RuntimeError("the forward failed after layer 1")

    for recorder in (theirs, ours):
        recorder.start_record()
        for pass_id, ids in enumerate(passes):
            if pass_id == 1:
                with pytest.raises(RuntimeError, match="failed after layer 1"):
                    forward(recorder, pass_id, ids, fail=True)
            else:
                forward(recorder, pass_id, ids, fail=False)
    their_counts = theirs.dump_record("object")["logical_count"]
    our_counts = ours.dump_record("object")["logical_count"]
    # SGLang commits the failed pass (its end runs in a finally); moestat discards it.
    assert their_counts.sum() == 12 and our_counts.sum() == 8
    assert their_counts[..., 4:8].sum() == 4 and our_counts[..., 4:8].sum() == 0
    assert ours.faults == {}
