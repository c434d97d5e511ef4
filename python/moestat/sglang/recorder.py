"""SGLang's ``ExpertDistributionRecorder`` interface (sglang 0.5.23), recording with moestat.

Same names, signatures, defaults and call semantics as SGLang's recorder, so every call site
in SGLang (model runner, MoE layers, EPLB manager, HTTP endpoints) works unchanged. What is
deliberately different, and why, is listed in docs/sglang.md; in short:

- a hook that arrives without a layer, or for a layer out of range, is counted in
  ``faults`` and logged once, never recorded into layer 0 and never raised into the engine;
- a pass is converted to logical experts with the placement in force when it ran (SGLang
  uses the map current at dump time for the whole window);
- under attention tensor parallelism the ranks of a group count the same tokens once;
- on CUDA every hook is one moestat kernel gated by a device-side flag; nothing syncs the
  host, and hooks captured into a CUDA graph record on every replay while recording is on.
"""

from __future__ import annotations

import collections
import contextlib
import logging

import numpy as np
import torch
from torch.utils.dlpack import to_dlpack

from .. import _core
from . import dumps, sources
from .config import RecorderConfig

logger = logging.getLogger(__name__)

# SGLang's per-token buffer width: traces hold 8 columns whatever the model's top-k.
PER_TOKEN_COLUMNS = 8


class ExpertDistributionRecorder:
    """The recorder interface; this base is the no-op recorder SGLang uses when no mode is set."""

    @staticmethod
    def init_new(expert_location_metadata, rank: int, **settings):
        """The recorder for the running engine, as SGLang's ``init_new``.

        Settings come from SGLang's runtime context when SGLang is loaded; ``settings``
        (``RecorderConfig`` fields) override them, and are the only source elsewhere. No
        mode gives the no-op recorder.
        """
        config = RecorderConfig.from_sglang(**settings)
        if config.mode is None:
            return NoopExpertDistributionRecorder()
        if expert_location_metadata is None:
            raise ValueError(
                "ExpertLocationMetadata is required for expert distribution recording; the "
                "model may not support it (set get_model_config_for_expert_location)")
        return MoestatExpertDistributionRecorder(expert_location_metadata, rank, config)

    @contextlib.contextmanager
    def with_current_layer(self, layer_idx):
        yield

    @contextlib.contextmanager
    def with_debug_name(self, debug_name):
        yield

    @contextlib.contextmanager
    def disable_this_region(self):
        yield

    @contextlib.contextmanager
    def with_forward_pass(self, forward_pass_id: int, forward_batch):
        yield {}

    def on_select_experts(self, topk_ids):
        pass

    def get_current_pass_count_buffer(self, layer_idx: int):
        return None

    def on_deepep_dispatch_normal(self, local_physical_count_of_layer, num_tokens_per_rank,
                                  num_tokens_per_rdma_rank, num_tokens_per_expert):
        pass

    def on_deepep_dispatch_low_latency(self, local_physical_count_of_layer):
        pass

    def start_record(self):
        self._on_not_implemented()

    def stop_record(self):
        self._on_not_implemented()

    def dump_record(self, output_mode="file"):
        self._on_not_implemented()

    @property
    def recording(self):
        return False

    def _on_not_implemented(self):
        raise Exception(
            "Please set ServerArgs.expert_distribution_recorder_mode to use "
            "ExpertDistributionRecorder.")


class NoopExpertDistributionRecorder(ExpertDistributionRecorder):
    """No mode set: every hook does nothing; control calls raise, as in SGLang."""


class MoestatExpertDistributionRecorder(ExpertDistributionRecorder):
    """Records with a moestat recorder behind SGLang's interface.

    Args:
        expert_location_metadata: SGLang's ``ExpertLocationMetadata`` (or any object with
            ``num_layers``, ``num_logical_experts``, ``num_physical_experts``, ``ep_size`` and
            ``physical_to_logical_map`` ``[L, P]``). Its map is followed as the engine
            updates it in place.
        rank: this process's expert-parallel rank.
        config: the ``RecorderConfig``.
    """

    def __init__(self, expert_location_metadata, rank: int, config: RecorderConfig):
        self._metadata = expert_location_metadata
        self._rank = rank
        self._config = config
        self._source = sources.choose_count_source(config)
        # Per-token traces go through host memory, as SGLang's own per-token gatherer does.
        self._cuda = config.device.startswith("cuda") and self._source != sources.PER_TOKEN
        self._recorder = self._make_recorder()
        self._faults = collections.Counter()

        self._recording = False
        self._layers = []  # with_current_layer stack
        self._disabled = 0
        self._in_pass = False  # a moestat pass is open
        self._pass_recorded = False  # ... and recording was on when it began
        self._next_pass_id = 0  # moestat's pass ids: one per pass, so records map back
        self._passes = {}  # detail modes: moestat pass id -> what the engine said about it
        self._passes_since_reset = 0
        self._ring_start = 0  # stat: SGLang's ring row of the first pass since the reset
        self._stream = None
        self._placement_source = None
        self._placement_source_version = None
        self._placement_version = 0
        self._count_rows = {}  # CUDA: the recorder's own per-layer rows, as tensors
        self._staging = None  # CPU: [L, P] rows handed out, folded in at the pass's end
        self._staged_layers = set()

        if config.reports_balancedness:
            logger.info("ExpertDistributionRecorder auto start record since "
                        f"expert_balancedness_report_mode={config.balancedness_report_mode}")
            self.start_record()

    # ---- what this recorder is ----

    @property
    def recorder(self):
        """The moestat recorder underneath (snapshots, placements)."""
        return self._recorder

    @property
    def config(self) -> RecorderConfig:
        return self._config

    @property
    def count_source(self) -> str:
        """Which hook counts: ``select_experts``, ``deepep_low_latency``, ``deepep_normal``
        or ``per_token``."""
        return self._source

    @property
    def faults(self) -> dict:
        """Hooks that could not be recorded, by kind (each kind is logged once)."""
        return dict(self._faults)

    def _make_recorder(self):
        metadata = self._metadata
        # Only per_token uses top_k: at most SGLang's width, at most every expert.
        topology = _core.ModelTopology(
            metadata.num_layers, metadata.num_logical_experts,
            min(PER_TOKEN_COLUMNS, metadata.num_logical_experts),
            num_physical_experts=metadata.num_physical_experts, ep_size=metadata.ep_size)
        window = self._config.buffer_size
        if window > 0 and self._config.reports_balancedness:
            # SGLang's balancedness history reaches further back than a small buffer.
            window = max(window, 1000)
        options = dict(mode=self._config.mode, window_size=window,
                       per_token_capacity=self._config.per_token_capacity)
        if not self._cuda:
            return _core.CpuRecorder(topology, **options)
        if not _core.has_cuda:
            raise RuntimeError(f"device {self._config.device!r}: this moestat was built without "
                               "the CUDA recorder")
        device = torch.device(self._config.device)
        index = device.index if device.index is not None else torch.cuda.current_device()
        self._recorder_device = index
        return _core.CudaRecorder(topology, device=index, **options)

    # ---- scopes ----

    @contextlib.contextmanager
    def with_current_layer(self, layer_idx):
        self._layers.append(layer_idx)
        try:
            yield
        finally:
            self._layers.pop()

    @contextlib.contextmanager
    def with_debug_name(self, debug_name):
        yield  # SGLang keeps one gatherer whatever the name; so does this recorder.

    @contextlib.contextmanager
    def disable_this_region(self):
        self._disabled += 1
        try:
            yield
        finally:
            self._disabled -= 1

    @contextlib.contextmanager
    def with_forward_pass(self, forward_pass_id: int, forward_batch):
        outputs = {}
        self._begin_pass(forward_pass_id, forward_batch)
        try:
            yield outputs
        except BaseException:
            # A forward that raised is not a pass: what its layers counted is discarded.
            self._abort_pass()
            raise
        self._end_pass()

    def _begin_pass(self, forward_pass_id, forward_batch):
        if self._in_pass:
            self._fault("nested_forward_pass", "with_forward_pass inside another forward pass; "
                        "the inner one is not a pass of its own")
            return
        self._pass_recorded = self._recording
        # On the CPU a pass that is not recorded costs nothing; on CUDA the pass is opened
        # anyway, because a replayed graph's hooks need one (the device flag keeps it empty).
        if not (self._pass_recorded or self._cuda):
            return
        try:
            self._follow_placement()
            self._use_current_stream()
            self._recorder.begin_pass(self._next_pass_id)
        except Exception as error:  # noqa: BLE001 - a serving process never dies of recording
            self._fault("begin_pass", error)
            return
        self._in_pass = True
        if self._pass_recorded and self._config.mode in ("per_pass", "per_token"):
            self._passes[self._next_pass_id] = dict(
                forward_pass_id=forward_pass_id,
                metadata=_per_token_metadata(forward_batch) if self._source == sources.PER_TOKEN
                else None,
                misc_objects=[])

    def _end_pass(self):
        if not self._in_pass:
            return
        self._in_pass = False
        pass_id = self._next_pass_id
        self._next_pass_id += 1
        try:
            self._fold_staged_counts()
            self._use_current_stream()
            self._recorder.end_pass()
        except Exception as error:  # noqa: BLE001
            self._passes.pop(pass_id, None)
            self._fault("end_pass", error)
            return
        if self._pass_recorded and self._recording:
            self._passes_since_reset += 1
        else:
            self._passes.pop(pass_id, None)

    def _abort_pass(self):
        if not self._in_pass:
            return
        self._in_pass = False
        self._passes.pop(self._next_pass_id, None)
        self._next_pass_id += 1
        for layer in self._staged_layers:
            self._staging[layer].zero_()
        self._staged_layers.clear()
        try:
            self._use_current_stream()
            self._recorder.abort_pass()
        except Exception as error:  # noqa: BLE001
            self._fault("abort_pass", error)

    # ---- hooks ----

    def on_select_experts(self, topk_ids):
        if self._source not in (sources.SELECT_EXPERTS, sources.PER_TOKEN):
            return  # the DeepEP hook of the same layer counts these tokens
        layer = self._hook_layer("on_select_experts")
        if layer is None:
            return
        try:
            if self._source == sources.PER_TOKEN:
                self._record_tokens(layer, topk_ids)
            else:
                self._recorder.record_topk(layer, _capsule(topk_ids))
        except Exception as error:  # noqa: BLE001
            self._fault("on_select_experts", error)

    def on_deepep_dispatch_low_latency(self, local_physical_count_of_layer):
        if self._source != sources.DEEPEP_LOW_LATENCY:
            return
        layer = self._hook_layer("on_deepep_dispatch_low_latency")
        if layer is None:
            return
        counts = local_physical_count_of_layer
        if self._config.elastic_ep:
            counts = _fit_length(counts, self._metadata.num_physical_experts // self._metadata.ep_size)
        try:
            self._recorder.record_local_counts(layer, _capsule(counts), self._rank)
        except Exception as error:  # noqa: BLE001
            self._fault("on_deepep_dispatch_low_latency", error)

    def on_deepep_dispatch_normal(self, local_physical_count_of_layer, num_tokens_per_rank,
                                  num_tokens_per_rdma_rank, num_tokens_per_expert):
        if self._source not in (sources.DEEPEP_NORMAL, sources.PER_TOKEN):
            return
        layer = self._hook_layer("on_deepep_dispatch_normal")
        if layer is None:
            return
        try:
            if self._source == sources.PER_TOKEN:
                self._passes[self._next_pass_id]["misc_objects"].append(dict(
                    layer_id=layer,
                    num_tokens_per_rank=num_tokens_per_rank.cpu().tolist(),
                    num_tokens_per_rdma_rank=(num_tokens_per_rdma_rank.cpu().tolist()
                                              if num_tokens_per_rdma_rank is not None else None),
                    num_tokens_per_expert=num_tokens_per_expert.cpu().tolist()))
            else:
                counts = np.asarray(local_physical_count_of_layer, dtype=np.int64)
                self._recorder.record_local_counts(layer, counts, self._rank)
        except Exception as error:  # noqa: BLE001
            self._fault("on_deepep_dispatch_normal", error)

    def get_current_pass_count_buffer(self, layer_idx: int):
        """The int32 ``[P]`` row an engine kernel adds this pass's routed ids of layer
        ``layer_idx`` into (SGLang's fused dispatch-map kernel), or None when not recording."""
        if not (self._in_pass and self._pass_recorded and self._recording):
            return None
        if self._source != sources.SELECT_EXPERTS:
            return None
        if not _is_layer_index(layer_idx) or not 0 <= layer_idx < self._metadata.num_layers:
            self._fault("get_current_pass_count_buffer",
                        f"layer {layer_idx!r} is not in [0, {self._metadata.num_layers})")
            return None
        if self._cuda:
            # The recorder's own row of the open pass: folded in on the device at end_pass.
            if layer_idx not in self._count_rows:
                self._count_rows[layer_idx] = torch.from_dlpack(
                    self._recorder.pass_count_row(layer_idx))
            return self._count_rows[layer_idx]
        if self._staging is None:
            self._staging = torch.zeros(
                (self._metadata.num_layers, self._metadata.num_physical_experts), dtype=torch.int32)
        self._staged_layers.add(layer_idx)
        return self._staging[layer_idx]

    def _hook_layer(self, hook):
        """The layer a hook records into, or None when the hook is not recorded."""
        if self._disabled:
            return None
        capturing = self._cuda and torch.cuda.is_current_stream_capturing()
        if not capturing and not (self._in_pass and self._pass_recorded and self._recording):
            return None  # not recording, or outside a pass: SGLang drops these too
        layer = self._layers[-1] if self._layers else None
        if layer is None:
            self._fault(f"{hook}_without_layer",
                        f"{hook} outside with_current_layer: the layer is unknown, so nothing "
                        "is recorded (never into layer 0)")
            return None
        if not _is_layer_index(layer):
            self._fault(f"{hook}_layer_not_an_index",
                        f"{hook}: layer {layer!r} is not an integer layer index")
            return None
        if not 0 <= layer < self._metadata.num_layers:
            self._fault(f"{hook}_layer_out_of_range",
                        f"{hook}: layer {layer!r} is not in [0, {self._metadata.num_layers})")
            return None
        # The engine may run a layer on another stream (two-batch overlap): count on the
        # stream the layer's ids are produced on.
        self._use_current_stream()
        return int(layer)

    def _record_tokens(self, layer, topk_ids):
        metadata = self._passes[self._next_pass_id]["metadata"]
        ids = topk_ids.detach().to("cpu", torch.int32)
        columns = self._recorder.topology.top_k
        if ids.dim() == 2 and ids.shape[1] < columns:
            ids = torch.nn.functional.pad(ids, (0, columns - ids.shape[1]), value=-1)
        rows = min(ids.shape[0], len(metadata["input_ids"]))
        self._recorder.record_topk(layer, ids, num_valid_tokens=rows)

    def _fold_staged_counts(self):
        """CPU: counts an engine added into handed-out rows join the pass, rank by rank."""
        slots = self._metadata.num_physical_experts // self._metadata.ep_size
        for layer in sorted(self._staged_layers):
            row = self._staging[layer]
            for rank in range(self._metadata.ep_size):
                self._recorder.record_local_counts(
                    layer, _capsule(row[rank * slots:(rank + 1) * slots]), rank)
            row.zero_()
        self._staged_layers.clear()

    # ---- control ----

    def start_record(self):
        if self._recording:
            logger.warning(
                "SGLang server is already recording expert ids. Did you forget to dump the "
                "expert ids recorded so far by sending requests to the "
                "`/stop_expert_distribution_record` and `/dump_expert_distribution_record` "
                "endpoints?")
        self._settle()
        self._reset()
        self._recording = True
        self._recorder.start()

    def stop_record(self):
        if not self._recording:
            logger.warning(
                "SGLang server has not been recording expert ids. Did you forget to start "
                "recording by sending request to the `/start_expert_distribution_record` "
                "endpoint?")
        self._settle()
        self._recording = False
        self._recorder.stop()

    def dump_record(self, output_mode="file"):
        """Dumps what was recorded and resets, as SGLang: ``"file"`` writes and returns None,
        ``"object"`` returns the dump (also for per_pass / per_token, where SGLang has none)."""
        if output_mode not in ("file", "object"):
            raise NotImplementedError(f"output_mode {output_mode!r}: 'file' or 'object'")
        self._settle()  # every pass that ended is in the snapshot
        snapshot = self._recorder.snapshot()
        if snapshot.num_passes != self._passes_since_reset:
            self._fault("dump_record", f"the recorder holds {snapshot.num_passes} passes "
                        f"where {self._passes_since_reset} were recorded")
        if self._config.mode in ("stat", "stat_approx"):
            output = dumps.stat_dump(
                snapshot, config=self._config, rank=self._rank, ring_start=self._ring_start,
                num_passes=self._passes_since_reset, num_gpus=self._metadata.ep_size,
                device=self._metadata.physical_to_logical_map.device,
                contributes=self._contributes())
            if output_mode == "file" and self._rank == 0:
                dumps.save_atomically(output, self._config.dump_dir(), dumps.stat_file_name())
        else:
            output = dumps.detail_dump(snapshot, passes=self._passes, rank=self._rank,
                                       physical_to_logical_map=self._metadata.physical_to_logical_map)
            if output_mode == "file":
                dumps.save_atomically(output, self._config.dump_dir(),
                                      dumps.detail_file_name(self._rank))
        self._reset()
        return output if output_mode == "object" else None

    @property
    def recording(self):
        return self._recording

    def _reset(self):
        logger.info("Resetting ExpertDistributionRecorder...")
        if self._config.buffer_size > 0:
            self._ring_start = (self._ring_start + self._passes_since_reset) % self._config.buffer_size
        self._passes_since_reset = 0
        self._passes = {k: v for k, v in self._passes.items() if k >= self._next_pass_id}
        self._recorder.reset()

    def _settle(self):
        """CUDA: waits for the passes already enqueued. The device takes control at the next
        pass that begins there, and the host may be a pass or two ahead; SGLang's control
        calls are ordered with its passes (its buffers are written on the stream), so these
        are too. Control calls are rare; passes never wait."""
        if self._cuda:
            torch.cuda.synchronize(self._recorder_device)

    def _contributes(self) -> bool:
        """Whether this rank's counts join the cross-rank sum (see sources.tokens_are_replicated)."""
        return not (sources.tokens_are_replicated(self._source) and self._config.attn_tp_rank != 0)

    # ---- engine state ----

    def _use_current_stream(self):
        if self._cuda:
            stream = torch.cuda.current_stream().cuda_stream
            if stream != self._stream:
                self._recorder.set_stream(stream)
                self._stream = stream

    def _follow_placement(self):
        """Installs the engine's map as a new placement version when it changed.

        SGLang updates ``physical_to_logical_map`` (and its CPU copy) in place; torch counts
        in-place writes in ``Tensor._version``, so a change is seen without reading the map,
        and the map is read (host copy preferred: no device sync) only when it changed.
        """
        mapping = getattr(self._metadata, "physical_to_logical_map_cpu", None)
        if mapping is None:
            mapping = self._metadata.physical_to_logical_map
        try:
            version = mapping._version
        except RuntimeError:  # an inference tensor has no version counter: compare contents
            version = mapping.detach().cpu().clone()
        if mapping is self._placement_source and _same_version(version,
                                                               self._placement_source_version):
            return
        self._placement_source, self._placement_source_version = mapping, version
        self._placement_version += 1
        self._recorder.set_placement(_core.Placement(
            mapping.detach().cpu().numpy(), num_logical_experts=self._metadata.num_logical_experts,
            version=self._placement_version))

    def _fault(self, kind, error):
        if self._faults[kind] == 0:
            logger.error(f"moestat recorder: {error} (further {kind} faults are counted in "
                         "recorder.faults, not logged)")
        self._faults[kind] += 1


def _capsule(array):
    """A torch tensor as a DLPack capsule: handed the tensor, the recorder would call
    Tensor.__dlpack__, whose Python checks cost most of an eager hook's host time."""
    return to_dlpack(array) if isinstance(array, torch.Tensor) else array


def _is_layer_index(layer) -> bool:
    """An integer, not a string, float or bool that would pass for one."""
    return isinstance(layer, (int, np.integer)) and not isinstance(layer, (bool, np.bool_))


def _same_version(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    return a == b


def _per_token_metadata(forward_batch):
    return dict(input_ids=forward_batch.input_ids.cpu().tolist(),
                positions=forward_batch.positions.cpu().tolist(),
                extend_seq_lens=forward_batch.extend_seq_lens_cpu,
                forward_mode=forward_batch.forward_mode.value)


def _fit_length(counts, length):
    """Elastic EP: a rank's counts may be longer or shorter than its slots (SGLang's rule)."""
    if counts.shape[0] > length:
        return counts[:length]
    return torch.nn.functional.pad(counts, (0, length - counts.shape[0]))
