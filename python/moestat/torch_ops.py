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
torch.compile traces they emit the op; otherwise they run its implementation at once (which
also serves a forward captured with torch.cuda.graph), because the dispatcher's path to a
Python custom op (autograd, ADInplaceOrView and backend layers, each in Python) costs an
eager forward several times the recorder's own host time per MoE layer
(docs/transformers.md).

A pass opened by a direct call while the current CUDA stream is being captured records on a
side stream: each record forks from the capturing stream where the ids are ready, the pass's
end joins the side stream back. In the captured graph the recorder's kernels then run beside
the model's instead of between them, off the step's critical path (what they add to a decode
step went from about 2.8 us per MoE layer to what docs/transformers.md measures). The ids are
marked as used by the side stream (Tensor.record_stream), so the caching allocator gives their
memory to nothing else before the side stream has read them. Passes run through the ops
(torch.compile) stay on the capturing stream: the compiler reuses a buffer once the op that
reads it returns, which a read still pending on another stream would race with.

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


class _Registration:
    """A recorder, the id of the next pass it opens (a counter of host calls: inside a
    replayed CUDA graph the id captured with the graph is replayed), and the side stream the
    open pass records on (None: the current stream)."""

    __slots__ = ("recorder", "next_pass_id", "side_stream", "_side_streams")

    def __init__(self, recorder: Recorder):
        self.recorder = recorder
        self.next_pass_id = 0
        self.side_stream = None
        self._side_streams = {}  # one per device, made on first use

    def side_stream_for(self, device: torch.device) -> "torch.cuda.Stream":
        stream = self._side_streams.get(device.index)
        if stream is None:
            stream = self._side_streams[device.index] = torch.cuda.Stream(device)
        return stream


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
    """Opens a pass of the recorder (on a side stream while the current stream is captured,
    see above)."""
    if torch.compiler.is_compiling():
        torch.ops.moestat.begin_pass(token, recorder_id)
    else:
        _open_pass(token, recorder_id, fork_when_capturing=True)


def record_topk(token: torch.Tensor, recorder_id: int, layer: int, topk_ids: torch.Tensor,
                num_valid_tokens: Optional[torch.Tensor] = None) -> None:
    """Counts one layer's top-k ids; num_valid_tokens: None (every row), or a one-element
    tensor on topk_ids' device holding how many leading rows are real."""
    if torch.compiler.is_compiling():
        torch.ops.moestat.record_topk(token, recorder_id, layer, topk_ids, num_valid_tokens)
    else:
        _record(token, recorder_id, layer, topk_ids, num_valid_tokens)


def end_pass(token: torch.Tensor, recorder_id: int) -> None:
    """Closes the open pass of the recorder."""
    if torch.compiler.is_compiling():
        torch.ops.moestat.end_pass(token, recorder_id)
    else:
        _close_pass(token, recorder_id)


def _registered(recorder_id: int) -> _Registration:
    registration = _registrations.get(recorder_id)
    if registration is None:
        raise Error(f"moestat op: no recorder registered under id {recorder_id} (detached?)")
    return registration


def _records_on_a_stream(registration: _Registration, token: torch.Tensor) -> bool:
    return token.is_cuda and hasattr(registration.recorder, "set_stream")


def _open_pass(token: torch.Tensor, recorder_id: int, fork_when_capturing: bool = False) -> None:
    registration = _registered(recorder_id)
    registration.side_stream = None
    if _records_on_a_stream(registration, token):
        current = torch.cuda.current_stream(token.device)
        if fork_when_capturing and torch.cuda.is_current_stream_capturing():
            registration.side_stream = registration.side_stream_for(token.device)
            # Waiting on the captured stream also brings the side stream into the capture.
            registration.side_stream.wait_stream(current)
        _use_stream(registration, current)
    registration.recorder.begin_pass(registration.next_pass_id)
    registration.next_pass_id += 1


def _use_stream(registration: _Registration, current: "torch.cuda.Stream") -> None:
    # Whatever stream runs the op (graph capture runs on a side stream of torch's own) is the
    # one the recorder's kernels must go to, unless the pass records on its side stream.
    stream = registration.side_stream or current
    registration.recorder.set_stream(stream.cuda_stream)


def _record(token, recorder_id, layer, topk_ids, num_valid_tokens) -> None:
    registration = _registered(recorder_id)
    if _records_on_a_stream(registration, token):
        current = torch.cuda.current_stream(token.device)
        side = registration.side_stream
        if side is not None:
            side.wait_stream(current)  # the ids are ready where the stream stands now
            topk_ids.record_stream(side)
            if num_valid_tokens is not None:
                num_valid_tokens.record_stream(side)
        _use_stream(registration, current)
    # The recorder gets DLPack capsules: handed a tensor, it would call Tensor.__dlpack__,
    # whose Python checks doubled the host time of this call in an eager forward (CPU).
    registration.recorder.record_topk(
        layer, to_dlpack(topk_ids),
        num_valid_tokens=None if num_valid_tokens is None else to_dlpack(num_valid_tokens))


def _close_pass(token: torch.Tensor, recorder_id: int) -> None:
    registration = _registered(recorder_id)
    if not _records_on_a_stream(registration, token):
        registration.recorder.end_pass()
        return
    current = torch.cuda.current_stream(token.device)
    _use_stream(registration, current)
    registration.recorder.end_pass()
    if registration.side_stream is not None:
        # The join: a capture must end with every stream it forked joined back.
        current.wait_stream(registration.side_stream)
        registration.side_stream = None


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
