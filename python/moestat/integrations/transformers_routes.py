"""Capture each sequence's routed experts from a Hugging Face ``transformers`` MoE model: the
rollout side of routing replay (docs/routing-replay.md).

    import moestat
    from moestat.integrations import transformers as moestat_hf
    from moestat.integrations import transformers_routes

    topology = moestat_hf.topology_from_config(model.config)
    recorder = moestat.CpuRouteRecorder(topology)          # CudaRouteRecorder on a GPU
    with transformers_routes.capture(model, recorder, ["prompt-a", "prompt-b"]) as capture:
        model.generate(**inputs, max_new_tokens=16)        # left-padded batch of 2
    routes = capture.finish()                               # {"prompt-a": RoutedExperts, ...}

Every forward of the model is one pass of the route recorder. Row b * seq + s of a router's
top-k ids is token s of sequence b; the 2-D attention mask says which tokens are real and, by
its running count, their position in the sequence (as ``generate`` computes position ids), so
padding is never recorded and position 0 is each sequence's first real token. Without a mask
every token is real and positions continue from the previous forward. A finished sequence of
n tokens has n - 1 routed positions: the last sampled token is never fed forward.

The pass's end reads the mask on the host (a synchronisation): capture eager forwards; a model
captured in a CUDA graph is recorded by calling the recorder's hooks around each replay
(docs/routing-replay.md).
"""

import numpy as np
import torch
from torch.utils.dlpack import to_dlpack

from .._core import Error, RouteRecorder
from ..engines.devices import StreamFollower, check_recorder_device, device_of
from ..engines.topology import check_routers
from . import transformers as moestat_hf
from .forward_hooks import ForwardHooks, forward_inputs


class RouteCapture(ForwardHooks):
    """The hooks capture() put on a model; detach() (or leaving the with block) removes them."""

    def __init__(self, model: torch.nn.Module, recorder: RouteRecorder, request_ids, routers):
        self.model = model
        self.recorder = recorder
        self.request_ids = list(request_ids)
        self._next_position = np.zeros(len(self.request_ids), dtype=np.int64)
        self._kept = []     # (layer, top-k ids) of the open pass
        self._rows = None   # the open pass's (mask, tokens) or None
        self._stream = StreamFollower(recorder)
        super().__init__(model, routers)

    def take(self) -> dict:
        """{request id: RoutedExperts} of the positions routed since the last take."""
        return {request: self.recorder.take(request) for request in self.request_ids}

    def finish(self) -> dict:
        """{request id: RoutedExperts} of every position not taken yet; forgets the requests."""
        return {request: self.recorder.finish(request) for request in self.request_ids}

    def _begin_pass(self, model, args, kwargs):
        tokens, mask = forward_inputs(args, kwargs)
        if tokens is None:
            raise Error(f"{type(model).__name__}: route capture needs input_ids or inputs_embeds")
        if tokens.shape[0] != len(self.request_ids):
            raise Error(f"{type(model).__name__}: a batch of {tokens.shape[0]} sequences, but "
                        f"{len(self.request_ids)} request ids")
        self._kept = []
        if tokens.is_cuda:
            self._stream.follow(tokens.device)
        self.recorder.begin_pass()
        # Set once the pass is open: the end hook closes only a pass this hook opened.
        self._rows = (mask if isinstance(mask, torch.Tensor) and mask.dim() == 2 else None,
                      tokens.shape[1])

    def _on_router(self, layer, router, args, output):
        # Recorded at the pass's end, in one call: the ids are router outputs nothing changes.
        self._kept.append((layer, output[moestat_hf.TOP_K_IDS]))

    def _end_pass(self, model, args, output):
        kept, self._kept = self._kept, []
        rows, self._rows = self._rows, None
        if rows is None:
            return  # the pre-hook refused the forward before it opened a pass
        if output is None:
            # The forward raised: what its layers wrote is discarded.
            self.recorder.abort_pass()
            return
        if kept:
            self.recorder.record_topk_layers([layer for layer, _ in kept],
                                             [to_dlpack(ids) for _, ids in kept])
        self.recorder.end_pass(self._spans(*rows))

    def _spans(self, mask, sequence_length):
        """(request id, first position, tokens, first row) of each sequence's real tokens."""
        if mask is None:
            spans = []
            for b, request in enumerate(self.request_ids):
                spans.append((request, int(self._next_position[b]), sequence_length,
                              b * sequence_length))
                self._next_position[b] += sequence_length
            return spans
        # The mask spans the cached tokens too; this forward's tokens are its last columns.
        mask = mask.detach().to("cpu", torch.int64).numpy()
        positions = np.cumsum(mask != 0, axis=1)[:, -sequence_length:] - 1
        real = mask[:, -sequence_length:] != 0
        spans = []
        for b, request in enumerate(self.request_ids):
            columns = np.flatnonzero(real[b])
            if columns.size == 0:
                continue
            if columns[-1] - columns[0] + 1 != columns.size:
                raise Error(f"sequence {b} ({request}): padding between its real tokens; route "
                            "capture takes left or right padding only")
            spans.append((request, int(positions[b, columns[0]]), int(columns.size),
                          b * sequence_length + int(columns[0])))
            self._next_position[b] = positions[b, columns[-1]] + 1
        return spans


def capture(model: torch.nn.Module, recorder: RouteRecorder, request_ids) -> RouteCapture:
    """Records every forward of model (a transformers MoE model of the families
    moestat.integrations.transformers supports) into recorder, one pass each: sequence b of
    the batch is request request_ids[b]. recorder's topology must match the model
    (moestat_hf.topology_from_config builds it); CpuRouteRecorder for a model on the CPU,
    CudaRouteRecorder for one on a GPU, with max_tokens_per_pass at least batch x sequence."""
    routers = moestat_hf.find_routers(model)
    check_routers(model, recorder.topology, routers)
    request_ids = [str(request) for request in request_ids]
    if len(set(request_ids)) != len(request_ids):
        raise Error("route capture: request ids must be distinct")
    check_recorder_device(recorder, device_of(model), type(model).__name__)
    return RouteCapture(model, recorder, request_ids, routers)
