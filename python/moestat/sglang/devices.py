"""Where the recorder counts, decided once: on the host (``CpuRecorder``) or on a GPU
(``CudaRecorder``).

A device makes the moestat recorder and answers what differs between the two: whether a pass
that is not recorded is opened at all, whether hooks are being captured into a CUDA graph,
which stream the recorder's work goes to, how control calls wait for passes in flight, and
the count rows an engine kernel adds a pass's routed ids into
(``get_current_pass_count_buffer``).
"""

from __future__ import annotations

import torch
from torch.utils.dlpack import to_dlpack

from .. import _core
from ..engines.devices import StreamFollower, cuda_index, make_recorder

# SGLang's per-token buffer width: traces hold 8 columns whatever the model's top-k.
PER_TOKEN_COLUMNS = 8


def make_device(config, metadata, *, on_host: bool):
    """The device of ``config.device`` (``on_host``: the host whatever it says, for sources
    that trace tokens through host memory, as SGLang's own per-token gatherer does)."""
    # Only per_token uses top_k: at most SGLang's width, at most every expert.
    topology = _core.ModelTopology(
        metadata.num_layers, metadata.num_logical_experts,
        min(PER_TOKEN_COLUMNS, metadata.num_logical_experts),
        num_physical_experts=metadata.num_physical_experts, ep_size=metadata.ep_size)
    window = config.buffer_size
    if window > 0 and config.reports_balancedness:
        # SGLang's balancedness history reaches further back than a small buffer.
        window = max(window, 1000)
    options = dict(mode=config.mode, window_size=window,
                   per_token_capacity=config.per_token_capacity)
    if on_host or not config.device.startswith("cuda"):
        return CpuDevice(make_recorder(topology, "cpu", **options), metadata)
    return CudaDevice(make_recorder(topology, config.device, **options),
                      cuda_index(config.device))


class CpuDevice:
    """A ``CpuRecorder``. Count rows handed to an engine are host rows, folded into the pass
    at its end."""

    #: A pass that is not recorded costs nothing: it is not opened.
    opens_unrecorded_passes = False

    def __init__(self, recorder, metadata):
        self.recorder = recorder
        self._metadata = metadata
        self._staging = None  # [L, P] int32 rows handed out this pass
        self._staged_layers = set()

    def is_capturing(self) -> bool:
        return False

    def use_current_stream(self):
        pass

    def settle(self):
        pass

    def count_buffer(self, layer: int) -> torch.Tensor:
        if self._staging is None:
            self._staging = torch.zeros(
                (self._metadata.num_layers, self._metadata.num_physical_experts),
                dtype=torch.int32)
        self._staged_layers.add(layer)
        return self._staging[layer]

    def fold_count_buffers(self):
        """Counts an engine added into handed-out rows join the pass, rank by rank."""
        slots = self._metadata.num_physical_experts // self._metadata.ep_size
        for layer in sorted(self._staged_layers):
            row = self._staging[layer]
            for rank in range(self._metadata.ep_size):
                self.recorder.record_local_counts(
                    layer, to_dlpack(row[rank * slots:(rank + 1) * slots]), rank)
            row.zero_()
        self._staged_layers.clear()

    def discard_count_buffers(self):
        for layer in self._staged_layers:
            self._staging[layer].zero_()
        self._staged_layers.clear()


class CudaDevice:
    """A ``CudaRecorder`` on GPU ``index``: every hook is a kernel on the stream the engine
    runs it on, gated by a device-side flag, so hooks captured into a CUDA graph record on
    every replay while recording is on. Count rows are the recorder's own, folded in on the
    device at ``end_pass``."""

    #: Every pass is opened, recorded or not: a replayed graph's hooks need one (the device
    #: flag keeps it empty).
    opens_unrecorded_passes = True

    def __init__(self, recorder, index: int):
        self.recorder = recorder
        self._index = index
        # The engine may run a layer on another stream (two-batch overlap): count on the
        # stream its ids are produced on.
        self.use_current_stream = StreamFollower(recorder).follow
        self._count_rows = {}  # layer -> the recorder's row, as a tensor

    def is_capturing(self) -> bool:
        return torch.cuda.is_current_stream_capturing()

    def settle(self):
        """Waits for the passes already enqueued. The device takes control at the next pass
        that begins there, and the host may be a pass or two ahead; SGLang's control calls
        are ordered with its passes (its buffers are written on the stream), so these are
        too. Control calls are rare; passes never wait."""
        torch.cuda.synchronize(self._index)

    def count_buffer(self, layer: int) -> torch.Tensor:
        if layer not in self._count_rows:
            self._count_rows[layer] = torch.from_dlpack(self.recorder.pass_count_row(layer))
        return self._count_rows[layer]

    def fold_count_buffers(self):
        pass

    def discard_count_buffers(self):
        pass
