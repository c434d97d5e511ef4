"""moestat.vllm.recording against vLLM 0.33.0's own routers on the CPU: routers built by vLLM's
router factory (create_fused_moe_router: on the CPU platform its CPURouter, a BaseRouter)
route random router logits; moestat's counts per pass and layer equal a numpy tally of the
logical ids those routers returned (their own return value; without EPLB vLLM returns the
logical ids it hands the capture function). Also: padding rows left out through vLLM's
EplbLayerState.num_unpadded_tokens_tensors (EPLB's mapping is a passthrough on the CPU), a
forward compiled with torch.compile(fullgraph=True), detach, and topology checks.

The model is vllm_stand_in_model.py's; the layer index comes from vLLM's extract_layer_index.

Skipped where vLLM's modules do not import (vllm_harness.py says when that is an error).
"""
import contextlib
import types

import numpy as np
import pytest

import vllm_harness  # noqa: F401 - first: vLLM's modules, or a skip

import torch

try:
    from vllm.distributed.eplb.eplb_state import EplbLayerState
    from vllm.model_executor.layers.fused_moe.router.base_router import BaseRouter
    from vllm_stand_in_model import HIDDEN, MOE_LAYERS, NUM_EXPERTS, NUM_LAYERS, TOP_K, Model, tally
except Exception as error:  # pragma: no cover - vLLM without its router modules' imports
    pytest.skip(f"vLLM's router modules do not import: {error!r}", allow_module_level=True)

import moestat
from moestat.vllm import recording


def new_recorder(model, **kwargs):
    recorder = moestat.CpuRecorder(recording.topology_from_model(model, NUM_LAYERS, **kwargs))
    recorder.start()
    return recorder


def test_the_routers_and_their_layers_are_found():
    model = Model()
    routers = recording.find_routers(model)
    assert sorted(routers) == list(MOE_LAYERS)
    assert all(isinstance(r, BaseRouter) for r in routers.values())
    topology = recording.topology_from_model(model, NUM_LAYERS)
    assert list(topology.moe_layers) == [i in MOE_LAYERS for i in range(NUM_LAYERS)]
    assert (topology.num_logical_experts, topology.top_k) == (NUM_EXPERTS, TOP_K)


def test_counts_equal_a_tally_of_the_ids_vllms_routers_returned():
    model = Model()
    recorder = new_recorder(model)
    rng = torch.Generator().manual_seed(1)
    sizes = [7, 1, 33, 12]
    with torch.no_grad(), recording.attach(model, recorder) as handle:
        assert handle.layers == list(MOE_LAYERS)
        for tokens in sizes:
            model(torch.randn(tokens, HIDDEN, generator=rng))
    counts = recorder.snapshot().logical_counts
    assert counts.shape == (len(sizes), NUM_LAYERS, NUM_EXPERTS)
    for call, tokens in enumerate(sizes):
        expected = tally(model, call)
        assert expected.sum() == tokens * TOP_K * len(MOE_LAYERS)
        np.testing.assert_array_equal(counts[call], expected)
    # detached: the routers' capture functions are gone, nothing more is recorded
    assert all(r.capture_fn is None for r in recording.find_routers(model).values())
    with torch.no_grad():
        model(torch.randn(3, HIDDEN))
    assert recorder.snapshot().logical_counts.shape[0] == len(sizes)


def test_padding_rows_are_left_out_through_vllms_num_unpadded_tokens():
    # What EplbState.add_model shares with every layer's EplbLayerState and prepare_forward
    # fills before each forward; on the CPU EPLB's mapping is a passthrough (logical ids).
    num_unpadded = [torch.tensor(0, dtype=torch.int32)]
    eplb_state = EplbLayerState(
        expert_load_view=torch.zeros(NUM_EXPERTS, dtype=torch.int64),
        logical_to_physical_map=torch.arange(NUM_EXPERTS).unsqueeze(1),
        logical_replica_count=torch.ones(NUM_EXPERTS, dtype=torch.int64),
        should_record_tensor=torch.tensor(True),
        num_unpadded_tokens_tensors=num_unpadded)
    model = Model(eplb_state, seed=3)
    recorder = new_recorder(model)
    rng = torch.Generator().manual_seed(4)
    batches = [(8, 5), (16, 16), (4, 1)]  # (padded to, real tokens)
    with torch.no_grad(), recording.attach(model, recorder):
        for padded, real in batches:
            num_unpadded[0].fill_(real)
            model(torch.randn(padded, HIDDEN, generator=rng))
    snapshot = recorder.snapshot()
    for call, (padded, real) in enumerate(batches):
        np.testing.assert_array_equal(snapshot.logical_counts[call], tally(model, call, real))
    assert snapshot.pass_num_tokens.tolist() == [real for _, real in batches]


@pytest.mark.parametrize("compiled", [False, True])
def test_without_eplb_the_forward_contexts_padding_rows_are_left_out(compiled):
    # vLLM's model runner fills ForwardContext.is_padding before every forward: padding rows
    # last, and all of them for an idle data-parallel rank's dummy batch. Compiled, the mask
    # is read by moestat_vllm::record_topk where it runs.
    from vllm.forward_context import ForwardContext, override_forward_context

    torch._dynamo.reset()
    model = Model(seed=7)
    recorder = new_recorder(model)
    rng = torch.Generator().manual_seed(8)
    batches = [(8, 5), (8, 8), (8, 0), (4, 1)]  # (padded to, real tokens); 0: a dummy batch
    inputs = [torch.randn(padded, HIDDEN, generator=rng) for padded, _ in batches]
    graph_ops = set()

    def backend(graph_module, example_inputs):  # Dynamo's graph, run as it is
        graph_ops.update(str(node.target) for node in graph_module.graph.nodes)
        return graph_module.forward

    with torch.no_grad(), recording.attach(model, recorder, passes=False) as handle:
        forward = torch.compile(model.forward, fullgraph=True, backend=backend) \
            if compiled else model.forward
        for (padded, real), hidden in zip(batches, inputs):
            context = ForwardContext(no_compile_layers={}, attn_metadata={}, slot_mapping={},
                                     is_padding=torch.arange(padded) >= real)
            with override_forward_context(context):
                handle.begin_pass()
                forward(hidden)
                handle.end_pass()
    if compiled:
        # The mask is read where the op runs, not traced into the graph: vLLM runs its
        # compiled code with Dynamo's guards dropped, and shapes of the mask vary by batch.
        assert "moestat_vllm.record_topk" in graph_ops, sorted(graph_ops)
        # What the compiled forward appended to .routed is not the ids: route again.
        for moe in model.moe().values():
            moe.routed.clear()
        with torch.no_grad():
            for hidden in inputs:
                model(hidden)
    snapshot = recorder.snapshot()
    for call, (padded, real) in enumerate(batches):
        np.testing.assert_array_equal(snapshot.logical_counts[call], tally(model, call, real))
    assert snapshot.pass_num_tokens.tolist() == [real for _, real in batches]


@contextlib.contextmanager
def recording_gathered_rows(monkeypatch, communicator):
    """A model whose MoE layers dispatch naively, attached to a started CpuRecorder, with
    vLLM's expert-parallel group standing in as get_ep_group() (its device_communicator:
    communicator). Yields (model, recorder, handle); the rows the model routes stand for
    gathered ones."""
    from vllm.distributed import parallel_state

    group = types.SimpleNamespace(device_communicator=communicator)
    monkeypatch.setattr(parallel_state, "get_ep_group", lambda: group)
    model = Model(seed=3)
    for moe in model.moe().values():
        moe.do_naive_dispatch_combine = True  # what recording reads of vLLM's MoERunner
    recorder = new_recorder(model)
    with torch.no_grad(), recording.attach(model, recorder) as handle:
        for moe in model.moe().values():  # route the rows given, without vLLM's dispatcher
            moe.do_naive_dispatch_combine = False
        yield model, recorder, handle


def stand_in_dispatcher(rank_in_group, get_sizes):
    """vLLM's all-to-all manager as recording reads it, in a communicator, over a group of 2."""
    return types.SimpleNamespace(all2all_manager=types.SimpleNamespace(
        _get_comm_group=lambda sequence_parallel: types.SimpleNamespace(
            world_size=2, rank_in_group=rank_in_group),
        _get_sizes=get_sizes))


def test_under_naive_dispatch_a_rank_counts_its_chunk_and_a_gather_it_cannot_find_is_a_fault(
        monkeypatch, caplog):
    # Every rank routes the rows vLLM's dispatcher gathered from its group; this one counts its
    # own chunk, where the dispatcher's sizes put it (test_vllm_worker.py runs vLLM's real
    # dispatcher over two processes). Here a stand-in dispatcher: rank 1 of [3, 4] rows.
    rng = torch.Generator().manual_seed(4)
    communicator = stand_in_dispatcher(1, lambda rows, group: [3, 4])
    with recording_gathered_rows(monkeypatch, communicator) as (model, recorder, handle):
        model(torch.randn(7, HIDDEN, generator=rng))
        with caplog.at_level("ERROR", logger=recording.__name__):
            model(torch.randn(5, HIDDEN, generator=rng))  # not the 7 rows the sizes gather
            model(torch.randn(6, HIDDEN, generator=rng))
    counts = recorder.snapshot().logical_counts
    np.testing.assert_array_equal(counts[0], tally(model, 0, 4, first=3))
    assert counts[1:].sum() == 0  # nothing of rows that are not what was gathered
    assert handle.faults == {"gathered_rows": 2 * len(MOE_LAYERS)}  # never raised
    assert [record.getMessage() for record in caplog.records] == [
        "moestat: a router of gathered rows has 5 rows, but vLLM's dispatcher gathered [3, 4] "
        "over its group: the rows are not counted (logged once; "
        "RecordingHandle.faults['gathered_rows'] counts them)"]


def _no_sizes(rows, group):
    raise AssertionError("dp_metadata is None")  # as vLLM's _get_sizes without a context


@pytest.mark.parametrize("communicator, kind", [
    (None, "no_dispatcher"),
    (stand_in_dispatcher(0, _no_sizes), "gathered_rows"),
], ids=["no_all_to_all_manager", "no_sizes"])
def test_a_naive_dispatch_whose_gather_cannot_be_found_is_a_fault(monkeypatch, communicator,
                                                                  kind):
    with recording_gathered_rows(monkeypatch, communicator) as (model, recorder, handle):
        model(torch.randn(4, HIDDEN))  # goes on; nothing of the MoE layers counted
    assert recorder.snapshot().logical_counts.sum() == 0
    assert handle.faults == {kind: len(MOE_LAYERS)}


def test_what_the_recorder_refuses_inside_a_forward_is_a_fault_not_an_exception(caplog):
    model = Model(seed=5)
    recorder = new_recorder(model)
    rng = torch.Generator().manual_seed(6)
    with torch.no_grad(), caplog.at_level("ERROR", logger=recording.__name__):
        with recording.attach(model, recorder) as handle:
            # what a compiled forward's op counts at once, here with no pass open
            for _ in range(2):
                torch.ops.moestat_vllm.record_topk(handle.token, handle.recorder_id, 1,
                                                   torch.zeros(2, TOP_K, dtype=torch.int32))
            handle.begin_pass()  # a pass already open when the forward's own begins
            model(torch.randn(4, HIDDEN, generator=rng))
    assert handle.faults == {"record_topk": 2, "begin_pass": 1}
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2 and "outside a pass" in messages[0], messages  # once per kind
    # the forward went on, into the pass that was open
    np.testing.assert_array_equal(recorder.snapshot().logical_counts, [tally(model, 0)])


def test_a_pass_closed_before_the_forward_ends_is_a_fault_at_its_end(caplog):
    model = Model(seed=7)
    recorder = new_recorder(model)
    rng = torch.Generator().manual_seed(8)
    with torch.no_grad(), caplog.at_level("ERROR", logger=recording.__name__):
        with recording.attach(model, recorder) as handle:
            # a hook of the engine's own, after attach's: it ends the pass the forward opened
            closing = model.register_forward_pre_hook(lambda module, args: handle.end_pass())
            model(torch.randn(4, HIDDEN, generator=rng))
            # the eager capture keeps its layers for the pass's end, which refuses them
            assert handle.faults == {"end_pass": 1}
            closing.remove()
            model(torch.randn(4, HIDDEN, generator=rng))  # the next pass records as before
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 1 and "end_pass without begin_pass" in messages[0], messages
    # the pass the engine's hook closed holds none of its forward's rows, the next pass holds
    # its own rows alone
    empty = np.zeros_like(tally(model, 0))
    np.testing.assert_array_equal(recorder.snapshot().logical_counts, [empty, tally(model, 1)])


def test_the_mask_is_counted_once_per_pass_not_once_per_layer():
    from torch.utils._python_dispatch import TorchDispatchMode
    from vllm.forward_context import ForwardContext, override_forward_context

    class CountSums(TorchDispatchMode):
        sums = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket is torch.ops.aten.sum:
                CountSums.sums += 1
            return func(*args, **(kwargs or {}))

    assert len(MOE_LAYERS) > 1
    model = Model(seed=10)
    recorder = new_recorder(model)
    context = ForwardContext(no_compile_layers={}, attn_metadata={}, slot_mapping={},
                             is_padding=torch.arange(6) >= 4)
    sums = []
    with torch.no_grad(), recording.attach(model, recorder):
        for masked in (False, True, True):
            CountSums.sums = 0
            with CountSums(), (override_forward_context(context) if masked
                               else contextlib.nullcontext()):
                model(torch.randn(6, HIDDEN))
            sums.append(CountSums.sums)
    assert sums[1] - sums[0] == 1 and sums[2] == sums[1], sums
    assert recorder.snapshot().pass_num_tokens.tolist() == [6, 4, 4]


def test_the_forward_contexts_mask_outranks_eplbs_count_left_from_the_step_before():
    # A dummy batch: EplbState.prepare_forward does not run before it, so EPLB's count is the
    # last step's; the model runner's is_padding marks every row padding.
    from vllm.forward_context import ForwardContext, override_forward_context

    eplb_state = EplbLayerState(
        expert_load_view=torch.zeros(NUM_EXPERTS, dtype=torch.int64),
        logical_to_physical_map=torch.arange(NUM_EXPERTS).unsqueeze(1),
        logical_replica_count=torch.ones(NUM_EXPERTS, dtype=torch.int64),
        should_record_tensor=torch.tensor(True),
        num_unpadded_tokens_tensors=[torch.tensor(5, dtype=torch.int32)])
    model = Model(eplb_state, seed=9)
    recorder = new_recorder(model)
    context = ForwardContext(no_compile_layers={}, attn_metadata={}, slot_mapping={},
                             is_padding=torch.ones(8, dtype=torch.bool))
    with torch.no_grad(), recording.attach(model, recorder), override_forward_context(context):
        model(torch.randn(8, HIDDEN))
    snapshot = recorder.snapshot()
    assert snapshot.logical_counts.sum() == 0
    assert snapshot.pass_num_tokens.tolist() == [0]


def test_a_forward_compiled_with_fullgraph_records_what_it_routes():
    torch._dynamo.reset()
    model = Model(seed=5)
    recorder = new_recorder(model)
    rng = torch.Generator().manual_seed(6)
    inputs = [torch.randn(9, HIDDEN, generator=rng) for _ in range(3)]
    with torch.no_grad(), recording.attach(model, recorder, passes=False) as handle:
        # the capture functions are traced into the graph (a graph break raises)
        compiled = torch.compile(model.forward, fullgraph=True, backend="aot_eager")
        for hidden in inputs:
            handle.begin_pass()
            compiled(hidden)
            handle.end_pass()
    # the compiled forward does not append to .routed: route the same inputs eagerly
    for moe in model.moe().values():
        moe.routed.clear()
    with torch.no_grad():
        for hidden in inputs:
            model(hidden)
    counts = recorder.snapshot().logical_counts
    assert counts.shape[0] == len(inputs)
    for call in range(len(inputs)):
        np.testing.assert_array_equal(counts[call], tally(model, call))


def test_a_topology_that_does_not_match_is_refused():
    model = Model()
    wrong_layers = moestat.CpuRecorder(moestat.ModelTopology(
        NUM_LAYERS, NUM_EXPERTS, TOP_K, moe_layers=[True] * NUM_LAYERS))
    with pytest.raises(moestat.Error, match="MoE layers"):
        recording.attach(model, wrong_layers)
    wrong_experts = moestat.CpuRecorder(moestat.ModelTopology(
        NUM_LAYERS, NUM_EXPERTS * 2, TOP_K,
        moe_layers=[i in MOE_LAYERS for i in range(NUM_LAYERS)]))
    with pytest.raises(moestat.Error, match="global_num_experts"):
        recording.attach(model, wrong_experts)
    with pytest.raises(moestat.Error, match="no vLLM MoE layer"):
        recording.attach(torch.nn.Linear(2, 2), wrong_layers)
