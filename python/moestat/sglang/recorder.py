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

import contextlib
import logging

import numpy as np

from ..engines.faults import Faults
from ..engines.passes import PassIds
from . import devices, modes, sources
from .config import RecorderConfig
from .placement_follower import PlacementFollower

logger = logging.getLogger(__name__)


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

    This class is the interface: scopes, the pass's life, which hook calls are recorded and
    into which layer, control calls and faults. What depends on the configuration is decided
    once, here: the count source (sources.py: which hooks count and how), the device
    (devices.py: host or GPU) and the pass log (modes.py: what a mode keeps and dumps).

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
        self._num_layers = expert_location_metadata.num_layers  # the recorder's, fixed
        self._config = config
        source_type = sources.count_source_type(config)
        self._device = devices.make_device(config, expert_location_metadata,
                                           on_host=source_type.traces_tokens)
        self._recorder = self._device.recorder
        self._source = source_type(self._recorder, expert_location_metadata, config, rank)
        self._log = modes.make_pass_log(config, expert_location_metadata, rank, self._source)
        self._placement = PlacementFollower(expert_location_metadata)
        self._pass_ids = PassIds()
        self._faults = Faults(logger, "recorder.faults")

        self._recording = False
        self._layers = []  # with_current_layer stack
        self._disabled = 0
        self._pass_recorded = False  # a pass is open and recording was on when it began

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
        return self._source.name

    @property
    def faults(self) -> Faults:
        """Hooks that could not be recorded, {kind: count} (each kind is logged once)."""
        return self._faults

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
        if self._pass_ids.open_id is not None:
            self._faults.add("nested_forward_pass", "with_forward_pass inside another forward "
                             "pass; the inner one is not a pass of its own")
            return
        recorded = self._recording
        if not (recorded or self._device.opens_unrecorded_passes):
            return
        try:
            self._placement.follow(self._recorder)
            self._device.use_current_stream()
            pass_id = self._pass_ids.begin(self._recorder)
        except Exception as error:  # noqa: BLE001 - a serving process never dies of recording
            self._faults.add("begin_pass", error)
            return
        self._pass_recorded = recorded
        if recorded:
            self._log.begin_pass(pass_id, forward_pass_id, forward_batch)

    def _end_pass(self):
        pass_id = self._pass_ids.close()
        if pass_id is None:
            return
        recorded, self._pass_recorded = self._pass_recorded, False
        try:
            self._device.fold_count_buffers()
            self._device.use_current_stream()
            self._recorder.end_pass()
        except Exception as error:  # noqa: BLE001
            self._log.end_pass(pass_id, kept=False)
            self._faults.add("end_pass", error)
            return
        self._log.end_pass(pass_id, kept=recorded and self._recording)

    def _abort_pass(self):
        pass_id = self._pass_ids.close()
        if pass_id is None:
            return
        self._pass_recorded = False
        self._log.end_pass(pass_id, kept=False)
        self._device.discard_count_buffers()
        try:
            self._device.use_current_stream()
            self._recorder.abort_pass()
        except Exception as error:  # noqa: BLE001
            self._faults.add("abort_pass", error)

    # ---- hooks ----

    def on_select_experts(self, topk_ids):
        self._run_hook("on_select_experts", self._source.select_experts, topk_ids)

    def on_deepep_dispatch_low_latency(self, local_physical_count_of_layer):
        self._run_hook("on_deepep_dispatch_low_latency", self._source.deepep_low_latency,
                       local_physical_count_of_layer)

    def on_deepep_dispatch_normal(self, local_physical_count_of_layer, num_tokens_per_rank,
                                  num_tokens_per_rdma_rank, num_tokens_per_expert):
        self._run_hook("on_deepep_dispatch_normal", self._source.deepep_normal,
                       local_physical_count_of_layer, num_tokens_per_rank,
                       num_tokens_per_rdma_rank, num_tokens_per_expert)

    def get_current_pass_count_buffer(self, layer_idx: int):
        """The int32 ``[P]`` row an engine kernel adds this pass's routed ids of layer
        ``layer_idx`` into (SGLang's fused dispatch-map kernel), or None when not recording."""
        if not (self._pass_recorded and self._recording and self._source.fills_count_buffers):
            return None
        if not _is_layer_index(layer_idx) or not 0 <= layer_idx < self._num_layers:
            self._faults.add("get_current_pass_count_buffer",
                             f"layer {layer_idx!r} is not in [0, {self._num_layers})")
            return None
        return self._device.count_buffer(layer_idx)

    def _run_hook(self, hook, count, *arguments):
        """``count(layer, *arguments)`` into the hook's layer, when the source counts this
        hook (``count`` is not None; otherwise another hook counts these tokens) and the call
        is recorded. One frame for every check: this is the per-layer host time."""
        if count is None or self._disabled:
            return
        if not (self._pass_recorded and self._recording or self._device.is_capturing()):
            return  # not recording, or outside a pass: SGLang drops these too
        layer = self._layers[-1] if self._layers else None
        if layer is None:
            self._faults.add(f"{hook}_without_layer",
                             f"{hook} outside with_current_layer: the layer is unknown, so nothing "
                             "is recorded (never into layer 0)")
            return
        if type(layer) is not int:  # a numpy integer, or no index at all
            if not _is_layer_index(layer):
                self._faults.add(f"{hook}_layer_not_an_index",
                                 f"{hook}: layer {layer!r} is not an integer layer index")
                return
            layer = int(layer)
        if not 0 <= layer < self._num_layers:
            self._faults.add(f"{hook}_layer_out_of_range",
                             f"{hook}: layer {layer!r} is not in [0, {self._num_layers})")
            return
        try:
            self._device.use_current_stream()
            count(layer, *arguments)
        except Exception as error:  # noqa: BLE001
            self._faults.add(hook, error)

    # ---- control ----

    def start_record(self):
        if self._recording:
            logger.warning(
                "SGLang server is already recording expert ids. Did you forget to dump the "
                "expert ids recorded so far by sending requests to the "
                "`/stop_expert_distribution_record` and `/dump_expert_distribution_record` "
                "endpoints?")
        self._device.settle()
        self._reset()
        self._recording = True
        self._recorder.start()

    def stop_record(self):
        if not self._recording:
            logger.warning(
                "SGLang server has not been recording expert ids. Did you forget to start "
                "recording by sending request to the `/start_expert_distribution_record` "
                "endpoint?")
        self._device.settle()
        self._recording = False
        self._recorder.stop()

    def dump_record(self, output_mode="file"):
        """Dumps what was recorded and resets, as SGLang: ``"file"`` writes and returns None,
        ``"object"`` returns the dump (also for per_pass / per_token, where SGLang has none)."""
        if output_mode not in ("file", "object"):
            raise NotImplementedError(f"output_mode {output_mode!r}: 'file' or 'object'")
        self._device.settle()  # every pass that ended is in the snapshot
        snapshot = self._recorder.snapshot()
        if snapshot.num_passes != self._log.passes_since_reset:
            self._faults.add("dump_record", f"the recorder holds {snapshot.num_passes} passes "
                             f"where {self._log.passes_since_reset} were recorded")
        output = self._log.dump(snapshot, to_file=output_mode == "file")
        self._reset()
        return output if output_mode == "object" else None

    @property
    def recording(self):
        return self._recording

    def _reset(self):
        logger.info("Resetting ExpertDistributionRecorder...")
        self._log.reset(self._pass_ids.open_id)
        self._recorder.reset()


def _is_layer_index(layer) -> bool:
    """An integer, not a string, float or bool that would pass for one."""
    return isinstance(layer, (int, np.integer)) and not isinstance(layer, (bool, np.bool_))
