"""The recorder hooks as torch custom ops, so recording survives torch.compile and CUDA graphs.

A hook called from Python inside a compiled model would break the graph; an op registered
with torch.library (with a fake implementation for tracing) is kept in the graph and runs
its real implementation wherever the graph runs, including inside a captured CUDA graph,
where CudaRecorder's hooks only enqueue kernels.

Two things about ops shape this module:

- Recorders are not tensors, so they cannot be op arguments: each one is registered here
  under an integer id, and the ops take the id.
- An op with no output is dead code to the compiler, and ops without data dependencies may
  be reordered. Every op therefore declares that it mutates ``token``, a one-element tensor
  made by :func:`ordering_token` (its contents are never read or written): that keeps the
  ops in the graph and in order (begin_pass, every record_topk, end_pass).

Call the ops through :func:`begin_pass`, :func:`record_topk` and :func:`end_pass`: while
torch.compile traces they emit the op; otherwise they run its implementation directly (which
also serves a forward captured with torch.cuda.graph), because the dispatcher's path to a
Python custom op (autograd, ADInplaceOrView and backend layers, each in Python) costs an
eager forward several times the recorder's own host time per MoE layer
(docs/transformers.md).

Called directly, record_topk keeps the layer's ids (a reference to the tensor, no copy) and
end_pass counts every kept layer at once (Recorder.record_topk_layers): the CUDA recorder then
adds one kernel per pass (per 64 layers) to the stream, after the last layer, instead of one
between every router and its experts, which is what it cost a captured decode step
(docs/transformers.md); the host makes one call instead of one per layer. The ids must not be
changed in place before the pass ends (no transformers router output is), and the kept
tensors hold their memory until then; past MAX_KEPT_BYTES the kept layers are counted at once.
Through the op (torch.compile) each layer is counted when its op runs: the compiler reuses a
buffer as soon as the ops that read it have run.

    import moestat.torch_ops as ops
    recorder_id = ops.register(recorder)
    token = ops.ordering_token(device)
    ops.begin_pass(token, recorder_id)
    ops.record_topk(token, recorder_id, layer, topk_ids)  # [, num_valid_tokens]
    ops.end_pass(token, recorder_id)
    ops.unregister(recorder_id)
"""

import itertools
import threading
from typing import Optional

import torch
from torch.utils.dlpack import to_dlpack

from ._core import Error, Recorder
from .engines.devices import StreamFollower
from .engines.passes import PassIds


# The most bytes of ids a pass keeps before counting them (a prefill of 32768 tokens of
# top-8 int64 ids is 2 MiB per layer).
MAX_KEPT_BYTES = 64 << 20


class _Registration:
    """A recorder, the stream its work goes to, the ids its passes open under
    (moestat.engines.passes), and the layers the open pass keeps to count at its end."""

    __slots__ = ("recorder", "stream", "pass_ids", "kept_layers", "kept_ids", "kept_valid",
                 "kept_bytes")

    def __init__(self, recorder: Recorder):
        self.recorder = recorder
        self.stream = StreamFollower(recorder)
        self.pass_ids = PassIds()
        self.forget_kept()

    def forget_kept(self) -> None:
        self.kept_layers = []
        self.kept_ids = []
        self.kept_valid = None  # the num_valid_tokens tensor every kept layer shares
        self.kept_bytes = 0


_registrations: dict[int, _Registration] = {}
_next_id = itertools.count(1)
_lock = threading.Lock()


def register(recorder: Recorder) -> int:
    """Makes recorder reachable from the ops; returns the id to pass them."""
    if not isinstance(recorder, Recorder):
        raise TypeError(f"expected a moestat recorder, got {type(recorder).__name__}")
    with _lock:
        recorder_id = next(_next_id)
        _registrations[recorder_id] = _Registration(recorder)
    return recorder_id


def unregister(recorder_id: int) -> None:
    """Forgets the recorder; ops that still name the id raise moestat.Error."""
    with _lock:
        _registrations.pop(recorder_id, None)


def ordering_token(device: "torch.device | str") -> torch.Tensor:
    """The tensor the ops declare they mutate, on the device the recorded model runs on.

    Its address is marked static, so that a model compiled with mode="reduce-overhead" keeps
    it in its CUDA graphs instead of refusing to capture a graph that mutates an input."""
    token = torch.zeros(1, dtype=torch.int32, device=device)
    torch._dynamo.mark_static_address(token)
    return token


def begin_pass(token: torch.Tensor, recorder_id: int) -> None:
    """Opens a pass of the recorder."""
    if torch.compiler.is_compiling():
        torch.ops.moestat.begin_pass(token, recorder_id)
    else:
        _open_pass(token, recorder_id)


def record_topk(token: torch.Tensor, recorder_id: int, layer: int, topk_ids: torch.Tensor,
                num_valid_tokens: Optional[torch.Tensor] = None) -> None:
    """Counts one layer's top-k ids (called directly: at the pass's end, see above);
    num_valid_tokens: None (every row), or a one-element tensor on topk_ids' device holding
    how many leading rows are real."""
    if torch.compiler.is_compiling():
        torch.ops.moestat.record_topk(token, recorder_id, layer, topk_ids, num_valid_tokens)
    else:
        _keep(token, recorder_id, layer, topk_ids, num_valid_tokens)


def record_topk_now(token: torch.Tensor, recorder_id: int, layer: int, topk_ids: torch.Tensor,
                    num_valid_tokens: Optional[torch.Tensor] = None) -> None:
    """Counts one layer's top-k ids at once, on the current stream, keeping nothing: for the
    implementation of another module's op, which runs inside compiled code (see above)."""
    _record(token, recorder_id, layer, topk_ids, num_valid_tokens)


def end_pass(token: torch.Tensor, recorder_id: int) -> None:
    """Closes the open pass of the recorder."""
    if torch.compiler.is_compiling():
        torch.ops.moestat.end_pass(token, recorder_id)
    else:
        _close_pass(token, recorder_id)


def abort_pass(token: torch.Tensor, recorder_id: int) -> None:
    """Closes the open pass without committing it: the layers it counted or kept are
    discarded (a forward that raised). Called directly, never traced: a compiled forward that
    raises has no later op to run."""
    registration = _registered(recorder_id, token)
    registration.forget_kept()
    registration.pass_ids.close()
    registration.recorder.abort_pass()


def _registered(recorder_id: int, token: torch.Tensor) -> _Registration:
    """The registration, its recorder set to the stream that runs the calling op."""
    registration = _lookup(recorder_id)
    if token.is_cuda:
        # Whatever stream runs the op (graph capture runs on a side stream) is the one the
        # recorder's kernels must go to.
        registration.stream.follow(token.device)
    return registration


def _lookup(recorder_id: int) -> _Registration:
    registration = _registrations.get(recorder_id)
    if registration is None:
        raise Error(f"moestat op: no recorder registered under id {recorder_id} (detached?)")
    return registration


def _open_pass(token: torch.Tensor, recorder_id: int) -> None:
    registration = _registered(recorder_id, token)
    registration.forget_kept()
    registration.pass_ids.begin(registration.recorder)


def _record(token, recorder_id, layer, topk_ids, num_valid_tokens) -> None:
    # The recorder gets DLPack capsules: handed a tensor, it would call Tensor.__dlpack__,
    # whose Python checks doubled the host time of this call in an eager forward (CPU).
    _registered(recorder_id, token).recorder.record_topk(
        layer, to_dlpack(topk_ids),
        num_valid_tokens=None if num_valid_tokens is None else to_dlpack(num_valid_tokens))


def _keep(token, recorder_id, layer, topk_ids, num_valid_tokens) -> None:
    # No stream is set here: the kept layers are counted on the stream current when they are.
    registration = _lookup(recorder_id)
    if registration.kept_layers and num_valid_tokens is not registration.kept_valid:
        # One count applies to a whole batch of layers.
        _count_kept(_registered(recorder_id, token))
    registration.kept_layers.append(layer)
    registration.kept_ids.append(topk_ids)
    registration.kept_valid = num_valid_tokens
    registration.kept_bytes += topk_ids.numel() * topk_ids.element_size()
    if registration.kept_bytes > MAX_KEPT_BYTES:
        _count_kept(_registered(recorder_id, token))


def _count_kept(registration: _Registration) -> None:
    """Counts the kept layers on the recorder's stream (set by the caller) and forgets them."""
    if not registration.kept_layers:
        return
    layers, ids, valid = registration.kept_layers, registration.kept_ids, registration.kept_valid
    registration.forget_kept()
    registration.recorder.record_topk_layers(
        layers, [to_dlpack(layer_ids) for layer_ids in ids],
        num_valid_tokens=None if valid is None else to_dlpack(valid))


def _close_pass(token: torch.Tensor, recorder_id: int) -> None:
    registration = _registered(recorder_id, token)
    registration.pass_ids.close()
    try:
        _count_kept(registration)
    finally:
        registration.recorder.end_pass()


@torch.library.custom_op("moestat::begin_pass", mutates_args=("token",))
def _begin_pass_op(token: torch.Tensor, recorder_id: int) -> None:
    _open_pass(token, recorder_id)


@torch.library.custom_op("moestat::record_topk", mutates_args=("token",))
def _record_topk_op(token: torch.Tensor, recorder_id: int, layer: int, topk_ids: torch.Tensor,
                    num_valid_tokens: Optional[torch.Tensor] = None) -> None:
    _record(token, recorder_id, layer, topk_ids, num_valid_tokens)


@torch.library.custom_op("moestat::end_pass", mutates_args=("token",))
def _end_pass_op(token: torch.Tensor, recorder_id: int) -> None:
    _close_pass(token, recorder_id)


# Tracing with fake tensors runs these instead: the ops produce nothing to trace.
@_begin_pass_op.register_fake
def _(token, recorder_id):
    return None


@_record_topk_op.register_fake
def _(token, recorder_id, layer, topk_ids, num_valid_tokens=None):
    return None


@_end_pass_op.register_fake
def _(token, recorder_id):
    return None
