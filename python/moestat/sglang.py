"""An SGLang-style recorder facade over moestat's recorders.

Engines written against SGLang's ``ExpertDistributionRecorder`` call ``with_forward_pass``,
``with_current_layer``, ``on_select_experts`` and the DeepEP hooks; this class takes the
same calls and records with moestat, so:

- a hook outside ``with_current_layer`` raises ``moestat.Error`` instead of writing the
  layer's counts into slot 0;
- with ``device="cuda"`` every hook enqueues one kernel on the current torch stream and
  nothing synchronises, so the forward pass can be captured in a CUDA graph;
- ``dump_record`` writes the ``.pt`` file SGLang writes, under SGLang's name and directory.

    recorder = ExpertDistributionRecorder(topology, mode="stat", buffer_size=1000)
    recorder.start_record()
    with recorder.with_forward_pass(step):
        for i, layer in enumerate(model.layers):
            with recorder.with_current_layer(i):
                topk_ids = layer.router(hidden)
                recorder.on_select_experts(topk_ids)
    path = recorder.dump_record()
"""

import contextlib

from ._core import CpuRecorder, Error, Placement, has_cuda, write_sglang_dump


class ExpertDistributionRecorder:
    """Records expert routing as SGLang's recorder does, with moestat underneath.

    Args:
        topology: the model's ``moestat.ModelTopology`` (layers count dense ones too).
        mode: ``"stat"``, ``"stat_approx"`` (DeepEP normal-dispatch counts), ``"per_pass"``,
            ``"per_token"`` or ``"decayed"``.
        buffer_size: passes a ``stat`` window keeps (SGLang's buffer size; -1 keeps all).
        device: ``"cpu"`` for host arrays or ``"cuda"`` for tensors on the current GPU.
        rank: this process's expert-parallel rank (DeepEP local counts, dump names).
        dump_dir: where ``dump_record`` writes; SGLang's default when None.
    """

    def __init__(self, topology, mode="stat", buffer_size=1000, device="cpu", rank=0,
                 dump_dir=None, **options):
        if device == "cuda":
            if not has_cuda:
                raise Error("device 'cuda': this moestat was built without the CUDA recorder")
            from ._core import CudaRecorder

            self._recorder = CudaRecorder(topology, mode=mode, window_size=buffer_size, **options)
        elif device == "cpu":
            self._recorder = CpuRecorder(topology, mode=mode, window_size=buffer_size, **options)
        else:
            raise Error(f"device: {device!r} is neither 'cpu' nor 'cuda'")
        self._cuda = device == "cuda"
        self._rank = rank
        self._dump_dir = dump_dir
        self._layers = []
        self._disabled = 0
        self._placement = Placement.trivial(topology.num_layers, topology.num_physical_experts,
                                            topology.num_logical_experts)

    @property
    def recorder(self):
        """The moestat recorder underneath (snapshots, placements)."""
        return self._recorder

    @contextlib.contextmanager
    def with_forward_pass(self, forward_pass_id):
        """One forward pass: every hook inside it belongs to pass ``forward_pass_id``."""
        if self._cuda:
            import torch

            self._recorder.set_stream(torch.cuda.current_stream().cuda_stream)
        self._recorder.begin_pass(forward_pass_id)
        try:
            yield
        finally:
            self._recorder.end_pass()

    @contextlib.contextmanager
    def with_current_layer(self, layer_idx):
        """Hooks inside record into decoder layer ``layer_idx`` (nests)."""
        if layer_idx is None:
            raise Error("with_current_layer: layer_idx is None; every hook needs its layer")
        self._layers.append(int(layer_idx))
        try:
            yield
        finally:
            self._layers.pop()

    @contextlib.contextmanager
    def disable_this_region(self):
        """Hooks inside are ignored (a speculative draft model's layers)."""
        self._disabled += 1
        try:
            yield
        finally:
            self._disabled -= 1

    def _layer(self, hook):
        if not self._layers:
            raise Error(f"{hook}: called outside with_current_layer; the layer is unknown")
        return self._layers[-1]

    def on_select_experts(self, topk_ids, num_valid_tokens=None):
        """The router's [tokens, k] physical expert ids of the current layer."""
        if self._disabled:
            return
        self._recorder.record_topk(self._layer("on_select_experts"), topk_ids, num_valid_tokens)

    def on_deepep_dispatch_low_latency(self, local_physical_count_of_layer):
        """DeepEP low-latency ``masked_m`` of this rank, for the current layer (exact)."""
        if self._disabled:
            return
        self._recorder.record_local_counts(self._layer("on_deepep_dispatch_low_latency"),
                                           local_physical_count_of_layer, self._rank)

    def on_deepep_dispatch_normal(self, local_physical_count_of_layer):
        """DeepEP normal-dispatch host counts of this rank (mode ``stat_approx``)."""
        if self._disabled:
            return
        self._recorder.record_local_counts(self._layer("on_deepep_dispatch_normal"),
                                           local_physical_count_of_layer, self._rank)

    def on_placement_change(self, placement):
        """The engine moved experts: passes that end from now on use ``placement``."""
        self._recorder.set_placement(placement)
        self._placement = placement

    def start_record(self):
        self._recorder.start()

    def stop_record(self):
        self._recorder.stop()

    def dump_record(self):
        """Writes SGLang's dump of what was recorded; returns its path."""
        return write_sglang_dump(self._recorder.snapshot(), self._placement, self._rank,
                                 self._dump_dir or "")
