"""Which hook counts, and how: one count source per configuration, chosen once as SGLang
chooses its gatherer.

With DeepEP both ``on_select_experts`` and a DeepEP hook fire in every MoE layer; counting
both would double each layer's total, so exactly one of them is the source and the other is
ignored, as in SGLang 0.5.23 (``_SinglePassGatherer.init_new``). A source's hooks that are
not its own are None here; the recorder ignores those calls.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.dlpack import to_dlpack

SELECT_EXPERTS = "select_experts"  # the router's top-k ids (every rank sees its tokens)
DEEPEP_LOW_LATENCY = "deepep_low_latency"  # masked_m: tokens each local expert received
DEEPEP_NORMAL = "deepep_normal"  # host counts of normal dispatch (stat_approx)
PER_TOKEN = "per_token"  # every token's top-k ids


def choose_count_source(config) -> str:
    """The source for ``config``; NotImplementedError where SGLang has no gatherer either."""
    if config.mode == "per_token":
        return PER_TOKEN
    if config.moe_a2a_backend == "mori":
        return DEEPEP_LOW_LATENCY
    if config.mode == "stat_approx":
        if config.moe_a2a_backend != "none" and config.deepep_mode == "normal":
            return DEEPEP_NORMAL
        raise NotImplementedError(
            "stat_approx records DeepEP normal-dispatch counts: it needs an all-to-all backend "
            f"with deepep_mode 'normal' (got moe_a2a_backend {config.moe_a2a_backend!r}, "
            f"deepep_mode {config.deepep_mode!r})")
    if config.moe_a2a_backend == "deepep":
        if config.deepep_mode == "normal":
            return SELECT_EXPERTS
        if config.deepep_mode == "low_latency":
            return DEEPEP_LOW_LATENCY
        raise NotImplementedError(
            f"deepep_mode {config.deepep_mode!r}: the recorder needs 'normal' or 'low_latency' "
            "to know which hook counts")
    return SELECT_EXPERTS


def count_source_type(config) -> type:
    """The ``CountSource`` class of ``config``'s source (see choose_count_source)."""
    return _TYPES[choose_count_source(config)]


class CountSource:
    """A count source over a moestat recorder: the hooks it counts, each called with the
    layer the hook records into (checked by the recorder) and the hook's own arguments.

    Args: ``recorder`` (the moestat recorder), ``metadata`` (SGLang's
    ``ExpertLocationMetadata``), ``config`` (the ``RecorderConfig``), ``rank`` (this
    process's expert-parallel rank).
    """

    name: str
    #: (layer, topk_ids), or None: on_select_experts does not count.
    select_experts = None
    #: (layer, local_physical_count_of_layer), or None.
    deepep_low_latency = None
    #: (layer, local_physical_count_of_layer, num_tokens_per_rank, num_tokens_per_rdma_rank,
    #: num_tokens_per_expert), or None.
    deepep_normal = None
    #: Whether an engine kernel may add this pass's routed ids into count rows
    #: (get_current_pass_count_buffer): the router's ids, the select_experts source's.
    fills_count_buffers = False
    #: Whether the tokens are traced through host memory (as SGLang's per-token gatherer).
    traces_tokens = False
    #: Whether every rank of an attention tensor-parallel group counts the same tokens: the
    #: router runs on every rank of the group over the same tokens; DeepEP's counts are what
    #: each rank's experts received, which no other rank counts.
    tokens_are_replicated = False

    def __init__(self, recorder, metadata, config, rank: int):
        self._recorder = recorder
        self._rank = rank

    def pass_record(self, forward_pass_id, forward_batch) -> dict:
        """What a per_pass / per_token dump keeps of a recorded pass (dumps.detail_dump)."""
        return dict(forward_pass_id=forward_pass_id, metadata=None, misc_objects=[])


class SelectExperts(CountSource):
    name = SELECT_EXPERTS
    fills_count_buffers = True
    tokens_are_replicated = True

    def select_experts(self, layer, topk_ids):
        # _capsule inline: this runs in every MoE layer of every pass.
        self._recorder.record_topk(
            layer, to_dlpack(topk_ids) if isinstance(topk_ids, torch.Tensor) else topk_ids)


class DeepepLowLatency(CountSource):
    name = DEEPEP_LOW_LATENCY

    def __init__(self, recorder, metadata, config, rank: int):
        super().__init__(recorder, metadata, config, rank)
        # Elastic EP: a rank's counts may be longer or shorter than its slots.
        self._slots = (metadata.num_physical_experts // metadata.ep_size if config.elastic_ep
                       else None)

    def deepep_low_latency(self, layer, local_physical_count_of_layer):
        counts = local_physical_count_of_layer
        if self._slots is not None:
            counts = _fit_length(counts, self._slots)
        self._recorder.record_local_counts(layer, _capsule(counts), self._rank)


class DeepepNormal(CountSource):
    name = DEEPEP_NORMAL

    def deepep_normal(self, layer, local_physical_count_of_layer, num_tokens_per_rank,
                      num_tokens_per_rdma_rank, num_tokens_per_expert):
        counts = np.asarray(local_physical_count_of_layer, dtype=np.int64)
        self._recorder.record_local_counts(layer, counts, self._rank)


class PerToken(CountSource):
    """Every token's top-k ids, and the batch they belong to (SGLang's per-token records)."""

    name = PER_TOKEN
    traces_tokens = True
    tokens_are_replicated = True

    def __init__(self, recorder, metadata, config, rank: int):
        super().__init__(recorder, metadata, config, rank)
        self._open = None  # the record of the recorded pass open now

    def pass_record(self, forward_pass_id, forward_batch) -> dict:
        self._open = super().pass_record(forward_pass_id, forward_batch)
        self._open["metadata"] = dict(
            input_ids=forward_batch.input_ids.cpu().tolist(),
            positions=forward_batch.positions.cpu().tolist(),
            extend_seq_lens=forward_batch.extend_seq_lens_cpu,
            forward_mode=forward_batch.forward_mode.value)
        return self._open

    def select_experts(self, layer, topk_ids):
        ids = topk_ids.detach().to("cpu", torch.int32)
        columns = self._recorder.topology.top_k
        if ids.dim() == 2 and ids.shape[1] < columns:
            ids = torch.nn.functional.pad(ids, (0, columns - ids.shape[1]), value=-1)
        rows = min(ids.shape[0], len(self._open["metadata"]["input_ids"]))
        self._recorder.record_topk(layer, ids, num_valid_tokens=rows)

    def deepep_normal(self, layer, local_physical_count_of_layer, num_tokens_per_rank,
                      num_tokens_per_rdma_rank, num_tokens_per_expert):
        self._open["misc_objects"].append(dict(
            layer_id=layer,
            num_tokens_per_rank=num_tokens_per_rank.cpu().tolist(),
            num_tokens_per_rdma_rank=(num_tokens_per_rdma_rank.cpu().tolist()
                                      if num_tokens_per_rdma_rank is not None else None),
            num_tokens_per_expert=num_tokens_per_expert.cpu().tolist()))


_TYPES = {source.name: source for source in (SelectExperts, DeepepLowLatency, DeepepNormal,
                                             PerToken)}


def _capsule(array):
    """A torch tensor as a DLPack capsule: handed the tensor, the recorder would call
    Tensor.__dlpack__, whose Python checks cost most of an eager hook's host time."""
    return to_dlpack(array) if isinstance(array, torch.Tensor) else array


def _fit_length(counts, length):
    """Elastic EP: a rank's counts cut or zero-padded to its slots (SGLang's rule)."""
    if counts.shape[0] > length:
        return counts[:length]
    return torch.nn.functional.pad(counts, (0, length - counts.shape[0]))
