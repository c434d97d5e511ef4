"""moestat in every vLLM (0.33.0) worker: record a running vLLM's routing and write it, summed
over the data-parallel ranks, as one moestat counts file.

vLLM mixes a ``--worker-extension-cls`` into the class of every worker it starts (tensor,
pipeline and data parallel alike) and calls its methods on all of them through
``collective_rpc``. ``RecordingExtension`` is such a class:

    from vllm import LLM

    llm = LLM(model, worker_extension_cls="moestat.vllm.worker.RecordingExtension")
    llm.collective_rpc("moestat_start")                  # every worker records from now on
    llm.generate(prompts)
    llm.collective_rpc("moestat_dump", args=("routing.json",))   # rank 0 writes the sum

or, for a server, with no call at all: ``MOESTAT_VLLM_RECORD_DIR=DIR vllm serve ...
--worker-extension-cls moestat.vllm.worker.RecordingExtension`` records from the first step
after vLLM's warm-up (its profile run and CUDA graph captures are not counted) and rank 0
writes ``DIR/vllm-routing.json`` when vLLM shuts down.

What each worker does: after vLLM has loaded the model, ``recording.attach`` puts a capture
function on every router and a pass around every forward (``recording.py``), into a
``CudaRecorder`` (``CpuRecorder`` for a model on the CPU) created stopped, so vLLM's CUDA graphs
capture the recording while its device-side switch is off; ``moestat_start`` turns it on.

What a dump sums: every token once, over the data-parallel ranks and pipeline stages (each stage
records its own layers). With tensor parallelism every rank of a group routes the same tokens,
so only its first rank's counts are added (every rank's when vLLM runs MoE sequence-parallel,
where each routes a share). Where vLLM's MoE layers dispatch naively (``MoERunner.
do_naive_dispatch_combine``: every rank routes the rows gathered from its group), each rank
records only its own chunk of the gathered rows (recording.py), so the same rule holds. The sum
is over vLLM's world group on its CPU (gloo) group; ranks that recorded fewer passes are padded
with empty passes at the start. Every worker must take part in a dump, as ``collective_rpc``
makes them.

The dummy batches that idle data-parallel ranks run to keep in step with the others (vLLM's
``execute_dummy_batch``) and the rows vLLM pads a batch with are not counted (recording.py: the
forward context's padding mask); a dummy batch is a pass of no tokens.
"""

import logging
import os

import numpy as np

from .._core import Error, write_logical_counts
from ..engines.devices import device_of, make_recorder
from ..engines.ranks import adds_its_counts, sum_over_ranks
from . import recording

logger = logging.getLogger(__name__)

ENV_RECORD_DIR = "MOESTAT_VLLM_RECORD_DIR"
ENV_RECORD_WINDOW = "MOESTAT_VLLM_RECORD_WINDOW"
DUMP_NAME = "vllm-routing.json"
DEFAULT_WINDOW = 1000


class WorkerRecording:
    """One worker's recorder and what attach() installed on its model."""

    def __init__(self, worker, mode: str, window_size: int):
        model = worker.get_model()
        model_config = worker.vllm_config.model_config
        topology = recording.topology_from_model(
            model, num_layers=model_config.get_total_num_hidden_layers()
            if model_config is not None else None)
        self.recorder = make_recorder(topology, device_of(model), mode=mode,
                                      window_size=window_size)
        self.handle = recording.attach(model, self.recorder)

    def counts(self) -> np.ndarray:
        """[passes, layers, experts] int64: this worker's window."""
        return np.asarray(self.recorder.snapshot().logical_counts, dtype=np.int64)

    def close(self) -> None:
        self.recorder.stop()
        self.handle.detach()


def gathered_counts(worker, counts: np.ndarray) -> np.ndarray:
    """The sum of the workers' counts over vLLM's world group (on its CPU group), each token
    once (moestat.engines.ranks): every data-parallel rank and pipeline stage adds its
    counts, a tensor-parallel group only its first rank's (every rank's when vLLM runs MoE
    sequence-parallel: each routes a share of the tokens; under naive dispatch each rank
    records its own rows of the gathered ones, recording.py). [passes, layers, experts], the
    same on every rank, ranks with fewer passes aligned at the newest. Collective."""
    import torch
    from vllm.distributed.parallel_state import get_tp_group, get_world_group

    adds = adds_its_counts(get_tp_group().rank_in_group,
                           not worker.vllm_config.parallel_config.use_sequence_parallel_moe)
    return sum_over_ranks(torch.from_numpy(counts), adds=adds,
                          group=get_world_group().cpu_group, align_passes=True).numpy()


class RecordingExtension:
    """vLLM's ``--worker-extension-cls``: moestat's recorder in every worker. vLLM makes it a
    base class of its worker class, so ``self`` is the worker; every name starts with
    ``moestat_`` (vLLM refuses an extension whose names its worker already has)."""

    def init_worker_extension(self) -> None:
        """vLLM's hook after a worker's device is set up, before its model is loaded: with
        MOESTAT_VLLM_RECORD_DIR set, wraps load_model (attach) and compile_or_warm_up_model
        (start after warm-up), and destroy_worker_extension writes the dump."""
        self.moestat_recording = None
        directory = os.environ.get(ENV_RECORD_DIR, "").strip()
        if not directory:
            return
        load_model, warm_up = self.load_model, self.compile_or_warm_up_model

        def load_model_then_attach(*args, **kwargs):
            result = load_model(*args, **kwargs)
            self.moestat_attach(window_size=_window_from_environment())
            return result

        def warm_up_then_start(*args, **kwargs):
            result = warm_up(*args, **kwargs)
            self.moestat_start()
            return result

        self.load_model = load_model_then_attach
        self.compile_or_warm_up_model = warm_up_then_start

    def destroy_worker_extension(self) -> None:
        """vLLM's hook at shutdown: with MOESTAT_VLLM_RECORD_DIR set, the dump (gathered); then
        the recording is detached, so neither its hooks nor its recorder outlive the worker
        (a recorder left in the registry was reported leaked at the interpreter's exit)."""
        if getattr(self, "moestat_recording", None) is None:
            return
        directory = os.environ.get(ENV_RECORD_DIR, "").strip()
        try:  # never fail vLLM's shutdown
            if directory:
                self.moestat_dump(os.path.join(directory, DUMP_NAME))
        except Exception:
            logger.exception("moestat: writing the routing dump failed")
        finally:
            try:
                self.moestat_detach()
            except Exception:
                logger.exception("moestat: detaching the recording at shutdown failed")

    def moestat_attach(self, mode: str = "stat", window_size: int = DEFAULT_WINDOW) -> None:
        """Creates this worker's recorder (stopped) and attaches it to the model vLLM loaded.
        mode: a moestat recorder mode whose snapshot has per-pass counts (stat, per_pass)."""
        if getattr(self, "moestat_recording", None) is not None:
            raise Error("moestat: this vLLM worker is already recording; moestat_detach first")
        self.moestat_recording = WorkerRecording(self, mode, window_size)

    def moestat_start(self, mode: str = "stat", window_size: int = DEFAULT_WINDOW) -> None:
        """Starts recording (attaching first, with mode and window_size, if not attached)."""
        if getattr(self, "moestat_recording", None) is None:
            self.moestat_attach(mode, window_size)
        self.moestat_recording.recorder.start()

    def moestat_stop(self) -> None:
        self._moestat_attached().recorder.stop()

    def moestat_reset(self) -> None:
        """Forgets what was recorded (the recorder keeps its on/off state)."""
        self._moestat_attached().recorder.reset()

    def moestat_counts(self) -> np.ndarray:
        """This worker's own window, [passes, layers, experts] int64 (not gathered)."""
        return self._moestat_attached().counts()

    def moestat_dump(self, path: str) -> str | None:
        """Writes the counts summed over the ranks (module docstring) to path on rank 0, as a
        moestat counts file by extension (.json, .pt, .safetensors; ``moestat inspect``,
        ``moestat plan --stats`` read it). Collective. Returns path on rank 0, else None."""
        from vllm.distributed.parallel_state import get_world_group

        attached = self._moestat_attached()
        total = gathered_counts(self, attached.counts())
        if get_world_group().rank_in_group != 0:
            return None
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        write_logical_counts(path, total)
        logger.info("moestat: %d passes of routing written to %s", total.shape[0], path)
        return path

    def moestat_faults(self) -> dict:
        """This worker's recording faults, {kind: count} (recording.RecordingHandle)."""
        return dict(self._moestat_attached().handle.faults)

    def moestat_detach(self) -> None:
        self._moestat_attached().close()
        self.moestat_recording = None

    def _moestat_attached(self) -> WorkerRecording:
        attached = getattr(self, "moestat_recording", None)
        if attached is None:
            raise Error("moestat: this vLLM worker is not recording (call moestat_start)")
        return attached


def _window_from_environment() -> int:
    text = os.environ.get(ENV_RECORD_WINDOW, "").strip()
    if not text:
        return DEFAULT_WINDOW
    try:
        window = int(text)
    except ValueError:
        window = 0
    if window < 1:
        raise Error(f"{ENV_RECORD_WINDOW}={text!r}: the window must be a number of passes >= 1")
    return window


__all__ = ["RecordingExtension", "WorkerRecording", "gathered_counts", "ENV_RECORD_DIR",
           "ENV_RECORD_WINDOW", "DUMP_NAME"]
