"""A stand-in vLLM model for the recording tests (test_vllm_recording.py, test_vllm_worker.py):
decoder layers whose MoE layers hold routers built by vLLM 0.33.0's own router factory
(create_fused_moe_router: on the CPU platform its CPURouter, a BaseRouter), and a numpy tally of
the logical ids those routers returned.

The MoE layers are stand-ins for vLLM's MoERunner (its constructor wants a whole FusedMoE
config and kernels): a module with vLLM's ``router`` and ``layer_name`` (its prefix), the two
attributes vLLM's own bind_routed_experts_capturer reads.
"""
import types

import numpy as np
import torch
from vllm.model_executor.layers.fused_moe.router.router_factory import create_fused_moe_router

NUM_LAYERS, NUM_EXPERTS, TOP_K, HIDDEN = 5, 16, 4, 8
MOE_LAYERS = (1, 2, 4)  # decoder layers 0 and 3 dense


def make_router(layer, eplb_state=None, device=None):
    """vLLM's router from its factory; the layers route by different schemes. device: where
    the correction bias lives (the model's device)."""
    if layer == 2:  # DeepSeek-style: grouped top-k, sigmoid scores, correction bias
        return create_fused_moe_router(
            top_k=TOP_K, global_num_experts=NUM_EXPERTS, use_grouped_topk=True,
            num_expert_group=4, topk_group=2, scoring_func="sigmoid",
            e_score_correction_bias=torch.linspace(-0.1, 0.1, NUM_EXPERTS, device=device),
            eplb_state=eplb_state)
    return create_fused_moe_router(top_k=TOP_K, global_num_experts=NUM_EXPERTS,
                                   renormalize=layer != 4, eplb_state=eplb_state)


class MoeLayer(torch.nn.Module):
    """What recording reads of vLLM's MoERunner: router, layer_name, do_naive_dispatch_combine
    and moe_config.is_sequence_parallel. Sequence-parallel, it routes this tensor-parallel
    rank's share of the batch (vLLM's sequence_parallel_chunk_impl). With
    do_naive_dispatch_combine set, it routes as MoERunner does then: vLLM's dispatcher gathers
    the router input of every rank of the group first (get_ep_group().dispatch_router_logits,
    in the forward context's sequence-parallel sizes), so every rank routes the group's rows."""

    do_naive_dispatch_combine = False
    route = None  # what routes in place of router.select_experts (a compiled one, say)
    moe_config = types.SimpleNamespace(is_sequence_parallel=False, sp_size=1, pcp_size=1,
                                       use_ep=True)

    def __init__(self, prefix, router):
        super().__init__()
        self.layer_name = prefix
        self.router = router
        self.gate = torch.nn.Linear(HIDDEN, NUM_EXPERTS, bias=False)
        self.routed = []  # the ids the router returned, per call

    def forward(self, hidden):
        logits = self.gate(hidden)
        routed_hidden, routed_logits = hidden, logits
        if self.moe_config.is_sequence_parallel:  # as vLLM's models do before a MoE block
            from vllm.model_executor.models.utils import sequence_parallel_chunk_impl

            routed_hidden, routed_logits = (sequence_parallel_chunk_impl(tensor)
                                            for tensor in (hidden, logits))
        if self.do_naive_dispatch_combine:
            from vllm.distributed.parallel_state import get_ep_group
            from vllm.forward_context import get_forward_context

            config = self.moe_config
            with get_forward_context().dp_metadata.sp_local_sizes(
                    config.sp_size, pcp_size=config.pcp_size, use_ep=config.use_ep):
                routed_hidden, routed_logits = get_ep_group().dispatch_router_logits(
                    routed_hidden, routed_logits, config.is_sequence_parallel)
                _, topk_ids = (self.route or self.router.select_experts)(routed_hidden,
                                                                         routed_logits)
        else:
            _, topk_ids = (self.route or self.router.select_experts)(routed_hidden, routed_logits)
        self.routed.append(topk_ids)
        return hidden + logits[:, :HIDDEN].tanh()


class DecoderLayer(torch.nn.Module):
    def __init__(self, index, router):
        super().__init__()
        self.mlp = (MoeLayer(f"model.layers.{index}.mlp.experts", router(index))
                    if index in MOE_LAYERS else torch.nn.Linear(HIDDEN, HIDDEN))

    def forward(self, hidden):
        return self.mlp(hidden)


class Model(torch.nn.Module):
    """router(layer) builds each MoE layer's router (default: make_router with eplb_state)."""

    def __init__(self, eplb_state=None, seed=0, router=None):
        super().__init__()
        torch.manual_seed(seed)
        if router is None:
            def router(layer):
                return make_router(layer, eplb_state)
        self.layers = torch.nn.ModuleList(DecoderLayer(i, router) for i in range(NUM_LAYERS))

    def forward(self, hidden):
        for layer in self.layers:
            hidden = layer(hidden)
        return hidden

    def moe(self):
        return {i: self.layers[i].mlp for i in MOE_LAYERS}


def tally(model, call, num_valid=None, first=0):
    """[layers, experts] counts numpy makes of the ids vLLM's routers returned in call (of
    num_valid rows from first, where given)."""
    counts = np.zeros((NUM_LAYERS, NUM_EXPERTS), np.int64)
    last = None if num_valid is None else first + num_valid
    for layer, moe in model.moe().items():
        ids = moe.routed[call].numpy()[first:last]
        counts[layer] = np.bincount(ids.reshape(-1), minlength=NUM_EXPERTS)
    return counts
