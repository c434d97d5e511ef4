"""moestat.vllm.recording against vLLM 0.33.0's own routers on the CPU: routers built by vLLM's
router factory (create_fused_moe_router: on the CPU platform its CPURouter, a BaseRouter)
route random router logits; moestat's counts per pass and layer equal a numpy tally of the
logical ids those routers returned (their own return value; without EPLB vLLM returns the
logical ids it hands the capture function). Also: padding rows left out through vLLM's
EplbLayerState.num_unpadded_tokens_tensors (EPLB's mapping is a passthrough on the CPU), a
forward compiled with torch.compile(fullgraph=True), detach, and topology checks.

The MoE layers are stand-ins for vLLM's MoERunner (its constructor wants a whole FusedMoE
config and kernels): a module with vLLM's ``router`` and ``layer_name`` (its prefix), the two
attributes vLLM's own bind_routed_experts_capturer reads; the layer index comes from vLLM's
extract_layer_index.

Skipped where vLLM's modules do not import (vllm_harness.py says when that is an error).
"""
import numpy as np
import pytest

import vllm_harness  # noqa: F401 - first: vLLM's modules, or a skip

import torch

try:
    from vllm.distributed.eplb.eplb_state import EplbLayerState
    from vllm.model_executor.layers.fused_moe.router.base_router import BaseRouter
    from vllm.model_executor.layers.fused_moe.router.router_factory import (
        create_fused_moe_router)
except Exception as error:  # pragma: no cover - vLLM without its router modules' imports
    pytest.skip(f"vLLM's router modules do not import: {error!r}", allow_module_level=True)

import moestat
from moestat.vllm import recording

NUM_LAYERS, NUM_EXPERTS, TOP_K, HIDDEN = 5, 16, 4, 8
MOE_LAYERS = (1, 2, 4)  # decoder layers 0 and 3 dense


def make_router(layer, eplb_state=None):
    """vLLM's router from its factory; the layers route by different schemes."""
    if layer == 2:  # DeepSeek-style: grouped top-k, sigmoid scores, correction bias
        return create_fused_moe_router(
            top_k=TOP_K, global_num_experts=NUM_EXPERTS, use_grouped_topk=True,
            num_expert_group=4, topk_group=2, scoring_func="sigmoid",
            e_score_correction_bias=torch.linspace(-0.1, 0.1, NUM_EXPERTS),
            eplb_state=eplb_state)
    return create_fused_moe_router(top_k=TOP_K, global_num_experts=NUM_EXPERTS,
                                   renormalize=layer != 4, eplb_state=eplb_state)


class MoeLayer(torch.nn.Module):
    """What recording reads of vLLM's MoERunner: router and layer_name."""

    def __init__(self, prefix, router):
        super().__init__()
        self.layer_name = prefix
        self.router = router
        self.gate = torch.nn.Linear(HIDDEN, NUM_EXPERTS, bias=False)
        self.routed = []  # the ids the router returned, per call

    def forward(self, hidden):
        logits = self.gate(hidden)
        _, topk_ids = self.router.select_experts(hidden, logits)
        self.routed.append(topk_ids)
        return hidden + logits[:, :HIDDEN].tanh()


class DecoderLayer(torch.nn.Module):
    def __init__(self, index, eplb_state):
        super().__init__()
        self.mlp = (MoeLayer(f"model.layers.{index}.mlp.experts",
                             make_router(index, eplb_state))
                    if index in MOE_LAYERS else torch.nn.Linear(HIDDEN, HIDDEN))

    def forward(self, hidden):
        return self.mlp(hidden)


class Model(torch.nn.Module):
    def __init__(self, eplb_state=None, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.layers = torch.nn.ModuleList(DecoderLayer(i, eplb_state) for i in range(NUM_LAYERS))

    def forward(self, hidden):
        for layer in self.layers:
            hidden = layer(hidden)
        return hidden

    def moe(self):
        return {i: self.layers[i].mlp for i in MOE_LAYERS}


def tally(model, call, num_valid=None):
    """[layers, experts] counts numpy makes of the ids vLLM's routers returned in call."""
    counts = np.zeros((NUM_LAYERS, NUM_EXPERTS), np.int64)
    for layer, moe in model.moe().items():
        ids = moe.routed[call].numpy()[:num_valid]
        counts[layer] = np.bincount(ids.reshape(-1), minlength=NUM_EXPERTS)
    return counts


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
