"""SGLang's routed-experts capturer (sglang 0.5.23, ``srt/state_capturer/routed_experts.py``)
with moestat's route recorder underneath.

Same interface as SGLang's ``RoutedExpertsCapturer``: ``create(...)``, ``capture(layer_id,
topk_indices)``, ``on_forward_end(forward_batch, can_run_graph, cuda_graph_batch,
no_copy_to_cpu=False)`` (None, or an object whose ``map_device_tensors(fn)`` and
``finalize()`` SGLang's overlap scheduler calls), ``get_topk(req_pool_idx, seqlen,
req_to_token_pool, start_len=0)`` (a torch int32 ``[seqlen - 1 - start_len,
num_hidden_layers, top_k]``, dense layers 0, what SGLang's host cache returns), ``destroy()``,
and the module's ``get_/set_/destroy_global_experts_capturer``. The request fields
(``return_routed_experts``, ``routed_experts_start_len``) and the detokenizer's base64 of
``get_topk``'s tensor are SGLang's own, so the bytes on the wire are the same.

Underneath, a moestat route recorder in slot keys (``moestat.CudaRouteRecorder`` on CUDA, the
CPU one on "cpu") keeps each token's ids in the narrow dtype, MoE layers only, with a
validity byte. SGLang writes a forward's rows under their KV-cache slots once the slots reach
the host: with the overlap scheduler, after the next forward has been launched. The recorder
ends each pass in ``on_forward_end`` into rows of their own (``end_pass_pending``), and
``finalize()`` (or, without overlap, ``on_forward_end``) gives them their KV slots
(``commit_slots``): the recorder's table maps each slot to its row, and its store holds the KV
pool's ``num_tokens`` rows plus the rows of passes in flight. docs/sglang.md ("Routed
experts") says what differs from SGLang and why.

``moestat.sglang.install.install_routed_experts()`` makes SGLang's
``RoutedExpertsCapturer.create`` build this capturer (``moestat.sglang.install_on_import(
routed_experts=True)``, or ``MOESTAT_SGLANG_ROUTED_EXPERTS=1`` with ``python -m
moestat.sglang.launch_server``). Needs torch.
"""

from __future__ import annotations

import collections
import logging
import sys
import weakref
from typing import Optional

import numpy as np
import torch
from torch.utils.dlpack import to_dlpack

from .. import _core
from ..engines.devices import StreamFollower, make_recorder
from ..engines.faults import Faults
from .config import sglang_setting
from .registry import capturer_slot

logger = logging.getLogger(__name__)

#: Passes whose rows may be recorded but not yet committed (SGLang's overlap scheduler
#: commits a forward after launching the next): the store's rows beyond the KV pool's.
IN_FLIGHT_PASSES = 4


class TopkCaptureOutput:
    """What ``on_forward_end(..., no_copy_to_cpu=True)`` returns: the forward's KV slots (a
    device tensor until SGLang's ``map_device_tensors`` copies it) and its pending pass (None:
    its tokens were not recorded). ``finalize()`` commits them; an output dropped without
    ``finalize()`` gives the pass's rows back."""

    def __init__(self, out_cache_loc: torch.Tensor, pending, capturer):
        self.out_cache_loc = out_cache_loc
        self.pending = pending
        self._release = weakref.finalize(self, capturer._release, pending)
        self._capturer = capturer

    def map_device_tensors(self, fn):
        # Device-tensor fields only, as SGLang's TopkCaptureOutput.
        self.out_cache_loc = fn(self.out_cache_loc)

    def finalize(self):
        if self._release.detach() is not None:  # once
            self._capturer._commit(self.out_cache_loc, self.pending)


class RoutedExpertsCapturer:
    """SGLang's routed-experts capturer, recording with moestat.

    Args (SGLang's, same order):
        model_config: SGLang's ``ModelConfig`` (``hf_text_config.num_hidden_layers``,
            ``num_experts_per_tok`` and the experts' count are read).
        num_tokens: KV slots the host cache covers (SGLang: the KV pool's token capacity).
        max_running_requests: for the batch rows, as SGLang sizes its device buffer.
        num_fused_shared_experts: id columns after the top_k routed ones (skipped).
        device: ``"cuda"``/``"cuda:N"`` (the CUDA route recorder) or ``"cpu"``.
    Keywords (moestat's):
        moe_layers: the decoder layers that route (``create`` finds them in the model's
            ``TopK`` modules); default every layer.
        num_experts: routed experts (default: the model's expert-location config or the HF
            config's ``n_routed_experts`` / ``num_experts`` / ``num_local_experts``).
        max_batch_size: batch rows of one forward (default SGLang's:
            ``max(chunked_prefill_size, max_running_requests) * num_dp_ranks``).
        in_flight_passes: passes recorded but not yet committed that the store has rows for.
    """

    @staticmethod
    def create(*, model, model_config, num_tokens: int, max_running_requests: int,
               device: str, **options) -> Optional["RoutedExpertsCapturer"]:
        """SGLang's ``create``: None unless the server runs with
        ``--enable-return-routed-experts`` (outside SGLang: always a capturer)."""
        if not sglang_setting(lambda c: c.get_exec().features.enable_return_routed_experts,
                              True):
            return None
        num_layers = int(model_config.hf_text_config.num_hidden_layers)
        options.setdefault("moe_layers", _moe_layers_of(model, num_layers))
        options.setdefault("num_experts", _num_experts_of(model, model_config))
        shared = getattr(getattr(model, "shared_experts_config", None),
                         "num_fused_shared_experts", 0) or 0
        return RoutedExpertsCapturer(model_config, num_tokens=num_tokens,
                                     max_running_requests=max_running_requests,
                                     num_fused_shared_experts=int(shared), device=device,
                                     **options)

    def __init__(self, model_config, num_tokens: int, max_running_requests: int,
                 num_fused_shared_experts: int, device: str, *, moe_layers=None,
                 num_experts: Optional[int] = None, max_batch_size: Optional[int] = None,
                 in_flight_passes: int = IN_FLIGHT_PASSES):
        text = model_config.hf_text_config
        self.num_layers = int(text.num_hidden_layers)
        self.topk_size = int(text.num_experts_per_tok)
        self.num_fused_shared_experts = int(num_fused_shared_experts)
        self.num_tokens = int(num_tokens)
        self.device = str(device)
        if num_experts is None:
            num_experts = _num_experts_of(None, model_config)
        if num_experts is None:
            raise ValueError("RoutedExpertsCapturer: the number of routed experts is not in "
                             "the model config; pass num_experts")
        layers = range(self.num_layers) if moe_layers is None else sorted(set(moe_layers))
        mask = [False] * self.num_layers
        for layer in layers:
            mask[layer] = True

        self._dp_local_slice = None  # SGLang's get_dp_local_slice_cpu under DP attention
        self._gather = None  # SGLang's attn_tp_all_gather_into_tensor, scattered DeepEP a2a
        self._attn_tp_size = 1
        self._find_sglang_parallelism()
        if max_batch_size is None:
            dp = sglang_setting(lambda c: c.get_parallel().num_dp_ranks, 1)
            chunk = sglang_setting(lambda c: c.get_schedule().chunked_prefill_size, 0) or 0
            max_batch_size = max(chunk * dp, max_running_requests * dp)
        self.max_batch_size = int(max_batch_size)
        device_width = self.topk_size + self.num_fused_shared_experts
        if self._gather is not None:
            self._gather_buffer = torch.empty(
                (self.max_batch_size * self._attn_tp_size, device_width), dtype=torch.int32,
                device=self.device)

        topology = _core.ModelTopology(self.num_layers, int(num_experts), self.topk_size,
                                       moe_layers=mask)
        options = dict(max_tokens_per_pass=self.max_batch_size * self._attn_tp_size,
                       capacity_tokens=self.num_tokens + in_flight_passes * self.max_batch_size,
                       keys="slots", num_slots=self.num_tokens)
        self._cuda = self.device.startswith("cuda")
        self._recorder = make_recorder(topology, self.device, routes=True, **options)
        self._layout = self._recorder.layout
        self._moe_layers = frozenset(self._layout.layers)
        self._columns = torch.as_tensor(list(self._layout.layers), dtype=torch.int64)

        capacity = options["capacity_tokens"]
        self._faults = Faults(logger, "capturer.faults")
        self._counts = collections.Counter()
        self._use_current_stream = StreamFollower(self._recorder).follow
        # The open pass, as the host saw it (captured graphs replay unseen):
        self._eager_layers = set()  # layers captured eagerly
        self._first_eager_layer = None
        self._held = None  # (layer, ids) of the first layer captured again, not recorded yet
        self._stale = False  # eager captures, then a CUDA graph captured: warm-up runs' ids
        self._pass_open = False
        self._begin_pass()
        logger.info(
            "moestat routed experts: %d MoE of %d layers, top-%d of %d experts, %s ids, "
            "%d B/token (SGLang: %d B), %d slots + %d rows in flight on %s",
            len(self._moe_layers), self.num_layers, self.topk_size, int(num_experts),
            self._layout.id_dtype, self._layout.bytes_per_token,
            4 * self.num_layers * self.topk_size, self.num_tokens,
            capacity - self.num_tokens, self.device)

    # ---- what this capturer is ----

    @property
    def recorder(self):
        """The moestat route recorder underneath."""
        return self._recorder

    @property
    def layout(self):
        """The ``moestat.RouteLayout`` of the stored rows (MoE layers, experts, top_k)."""
        return self._layout

    @property
    def faults(self) -> Faults:
        """What could not be recorded or read, {kind: count} (each kind is logged once)."""
        return self._faults

    def tallies(self) -> dict:
        """The recorder's tallies (``layers_written_twice``: a layer routed again in one
        forward, the first kept; ``invalid_ids``; ...) and the capturer's own:
        ``stray_passes`` (captures of a forward SGLang never ended, discarded),
        ``tokens_without_room`` and ``tokens_held`` (KV slots holding a recorded row). On
        CUDA this reads the device: not for the forward path."""
        out = dict(self._recorder.tallies()) if self._recorder is not None else {}
        out.update(stray_passes=self._counts["stray_passes"])
        return out

    # ---- SGLang's interface ----

    def capture(self, layer_id: int, topk_indices: torch.Tensor):
        """One MoE layer's top-k ids for the forward's batch rows (logical ids, as SGLang's
        TopK passes them, before EPLB maps them to slots); the first top_k columns are read."""
        try:
            if layer_id not in self._moe_layers:
                self._faults.add("capture_layer_not_moe",
                                 f"capture: layer {layer_id!r} is not one of the model's MoE "
                                 f"layers {sorted(self._moe_layers)}; not recorded")
                return
            width = topk_indices.shape[1]
            device_width = self.topk_size + self.num_fused_shared_experts
            if width != device_width and width != self.topk_size:
                self._faults.add("capture_width",
                                 f"capture: top-k width {width} is neither the device width "
                                 f"{device_width} nor its routed part {self.topk_size}; not "
                                 "recorded")
                return
            if self._gather is not None:
                topk_indices = self._gather_topk(topk_indices, device_width)
            capturing = False
            if self._cuda:
                self._use_current_stream()
                capturing = torch.cuda.is_current_stream_capturing()
            if capturing:
                self._stale = self._stale or bool(self._eager_layers)
            elif self._note_eager(layer_id, topk_indices):
                return
            self._recorder.record_topk(layer_id, to_dlpack(topk_indices))
        except Exception as error:  # noqa: BLE001 - a serving process never dies of recording
            self._faults.add("capture", error)

    def on_forward_end(self, forward_batch, can_run_graph: bool,
                       cuda_graph_batch: Optional[int], no_copy_to_cpu: bool = False):
        """Ends the forward's pass: batch rows become the tokens of ``out_cache_loc`` (rows
        past them are padding). Commits now (reading ``out_cache_loc`` on the host, as SGLang
        does), or, with ``no_copy_to_cpu``, returns what ``finalize()`` commits. Tokens that
        could not be recorded are committed as such: their slots read as not recorded."""
        locs = pending = None
        try:
            start, stop = self._local_rows(forward_batch, can_run_graph, cuda_graph_batch)
            locs = forward_batch.out_cache_loc_virtual
            if locs is None:
                locs = forward_batch.out_cache_loc
            count = min(stop - start, int(locs.shape[0]))
            if count < int(locs.shape[0]):
                self._faults.add("on_forward_end_rows",
                                 f"on_forward_end: {locs.shape[0]} KV slots but {stop - start} "
                                 f"batch rows; the first {count} recorded")
                locs = locs[:count]
            if self._held is not None:  # the forward's first layer, routed again at its end
                held, self._held = self._held, None
                self._recorder.record_topk(held[0], to_dlpack(held[1]))
            if self._stale:
                # A graph replayed into a pass that holds a warm-up run's ids: which rows
                # are whose cannot be told, so none is recorded.
                self._faults.add("forward_after_graph_capture",
                                 "on_forward_end: the first forward after a CUDA graph capture was "
                                 "a replay, into the capture's eager warm-up ids; its tokens are "
                                 "not recorded", count)
            else:
                if self._cuda:
                    self._use_current_stream()
                pending = self._recorder.end_pass_pending(start, count)
                self._pass_open = False
                if pending.tokens_without_room:
                    self._faults.add("tokens_without_room",
                                     f"on_forward_end: no store rows for {pending.tokens_without_room}"
                                     " tokens (more than the in-flight passes' rows are waiting for "
                                     "finalize()); not recorded", pending.tokens_without_room)
        except Exception as error:  # noqa: BLE001
            self._faults.add("on_forward_end", error)
        finally:
            self._begin_pass()  # a replayed graph's hooks write into the pass open then
        if locs is None:
            return None
        if no_copy_to_cpu:
            return TopkCaptureOutput(locs.clone(), pending, self)
        self._commit(locs, pending)
        return None

    def get_topk(self, req_pool_idx: int, seqlen: int, req_to_token_pool,
                 start_len: int = 0) -> torch.Tensor:
        """The request's rows for positions ``[start_len, seqlen - 1)``: int32
        ``[n, num_hidden_layers, top_k]``, dense layers 0, as SGLang's host cache. A slot
        never recorded reads as 0s (as in SGLang) and counts in ``faults``."""
        if start_len < 0:
            raise ValueError(f"{start_len=} must be non-negative")
        start_len = min(start_len, seqlen - 1)
        locs = req_to_token_pool.req_to_token[req_pool_idx][start_len: seqlen - 1].cpu()
        out = torch.zeros((int(locs.shape[0]), self.num_layers, self.topk_size),
                          dtype=torch.int32)
        if out.shape[0] == 0:
            return out
        try:
            slots = locs.numpy().astype(np.int64)
            inside = (slots >= 0) & (slots < self.num_tokens)
            if not inside.all():
                self._faults.add("get_topk_slot_out_of_range",
                                 f"get_topk: KV slots outside [0, {self.num_tokens}) read as 0s")
            routes = self._recorder.read_slots(np.where(inside, slots, -1).tolist())
            valid = np.asarray(routes.valid)
            out[:, self._columns, :] = torch.from_numpy(np.asarray(routes.ids).astype(np.int32))
            self._count_unrecorded(valid)
        except Exception as error:  # noqa: BLE001
            self._faults.add("get_topk", error)
            out.zero_()
        return out

    def destroy(self):
        """Frees the store (idempotent); later calls are counted as faults."""
        self._recorder = None

    # ---- passes ----

    def _begin_pass(self):
        if self._recorder is None:
            return
        try:
            if self._cuda:
                self._use_current_stream()
            if self._pass_open:
                self._recorder.abort_pass()
                self._pass_open = False
            self._recorder.begin_pass()
            self._pass_open = True
        except Exception as error:  # noqa: BLE001
            self._faults.add("begin_pass", error)
        self._eager_layers.clear()
        self._first_eager_layer = None
        self._held = None
        self._stale = False

    def _note_eager(self, layer, ids) -> bool:
        """Tells a new forward from a second write in the same one; True: ``ids`` are held.

        SGLang runs forwards it never ends with on_forward_end (warm-up and dummy runs, the
        eager runs before each CUDA-graph capture, a forward that raised): their ids must not
        stand for the next forward's. A forward captures its layers in order from its first
        MoE layer, so that layer captured again starts a new forward, unless it is a draft or
        MTP router writing it at the end of the same forward (SGLang #26980): the ids are
        held until the next capture (a new forward: the pass restarts without the stray
        one's ids) or on_forward_end (the same forward: recorded, and tallied as a layer
        written twice, the first kept)."""
        if self._held is not None or self._stale:
            held, self._held = self._held, None
            self._counts["stray_passes"] += 1
            self._begin_pass()
            if held is not None:
                self._first_eager_layer = held[0]
                self._eager_layers.add(held[0])
                self._recorder.record_topk(held[0], to_dlpack(held[1]))
        if layer == self._first_eager_layer:
            self._held = (layer, ids.clone())
            return True
        if self._first_eager_layer is None:
            self._first_eager_layer = layer
        self._eager_layers.add(layer)
        return False

    def _local_rows(self, forward_batch, can_run_graph, cuda_graph_batch):
        """The batch rows of this rank's tokens (SGLang's ``_get_local_slice``)."""
        if self._dp_local_slice is not None:
            start, count = self._dp_local_slice(forward_batch, can_run_graph, cuda_graph_batch)
            return int(start), int(start) + int(count)
        return 0, int(forward_batch.out_cache_loc.shape[0])

    def _gather_topk(self, topk, device_width):
        """Scattered DeepEP: every attention-TP rank's rows, as SGLang gathers them."""
        if topk.shape[1] != device_width:
            topk = torch.nn.functional.pad(topk, (0, device_width - topk.shape[1]), value=-1)
        gathered = self._gather_buffer[: topk.shape[0] * self._attn_tp_size]
        self._gather(gathered, topk.to(torch.int32))
        return gathered

    # ---- committing a forward's KV slots ----

    def _release(self, pending):
        """A dropped output's pass: its rows go back (called by the GC; never raises)."""
        try:
            if pending is not None and self._recorder is not None:
                self._recorder.release_pending(pending)
        except Exception as error:  # noqa: BLE001
            self._faults.add("release", error)

    def _commit(self, out_cache_loc, pending):
        """KV slot out_cache_loc[t] now holds the pending pass's token t (pending None: the
        forward's tokens were not recorded, and their slots read as such, never as their
        previous tokens); the recorder frees the rows the slots held."""
        try:
            slots = np.asarray(out_cache_loc.cpu() if isinstance(out_cache_loc, torch.Tensor)
                               else out_cache_loc).astype(np.int64).reshape(-1).tolist()
            if pending is None:
                outside = self._recorder.clear_slots(slots)
            else:
                outside = self._recorder.commit_slots(pending, slots)["slots_out_of_range"]
        except Exception as error:  # noqa: BLE001
            self._faults.add("finalize", error)
            self._release(pending)
            return
        if outside:
            self._faults.add("slot_out_of_range",
                             f"on_forward_end: KV slots outside [0, {self.num_tokens}); not "
                             "recorded", outside)

    def _count_unrecorded(self, valid: np.ndarray):
        recorded = valid.any(axis=1)
        tokens = int((~recorded).sum())
        if tokens:
            self._faults.add("unrecorded_tokens",
                             f"get_topk: {tokens} tokens whose KV slot holds no recorded routing "
                             "read as 0s (as SGLang's zero-initialised host cache)", tokens)
        layer_rows = int((~valid[recorded]).sum())
        if layer_rows:
            self._faults.add("unrecorded_layer_rows",
                             f"get_topk: {layer_rows} (token, MoE layer) rows not recorded (a "
                             "layer not captured, or invalid ids) read as 0s", layer_rows)

    # ---- SGLang's surroundings ----

    def _find_sglang_parallelism(self):
        """DP attention and scattered DeepEP, where SGLang runs in this process (as SGLang's
        capturer decides them; never imports SGLang)."""
        dp = sys.modules.get("sglang.srt.layers.dp_attention")
        moe = sys.modules.get("sglang.srt.layers.moe")
        try:
            backend = moe.get_moe_a2a_backend() if moe is not None else None
            scattered = backend is not None and (backend.is_deepep() or backend.is_deepep_v2())
            dp_attention = dp is not None and dp.is_dp_attention_enabled()
        except Exception:  # noqa: BLE001 - an SGLang without these: neither
            return
        if scattered and dp is not None:
            self._gather = dp.attn_tp_all_gather_into_tensor
            self._attn_tp_size = sglang_setting(lambda c: c.get_parallel().attn_tp_size, 1)
        elif dp_attention:
            self._dp_local_slice = dp.get_dp_local_slice_cpu


# ---- the process's capturer ----


def get_global_experts_capturer() -> Optional[RoutedExpertsCapturer]:
    """The capturer every call site uses (SGLang's resources when SGLang runs here)."""
    return capturer_slot.get()


def set_global_experts_capturer(capturer: Optional[RoutedExpertsCapturer]):
    capturer_slot.set(capturer)


def destroy_global_experts_capturer():
    if (capturer := get_global_experts_capturer()) is not None:
        capturer.destroy()
    set_global_experts_capturer(None)


# ---- reading SGLang's model and settings ----


def _moe_layers_of(model, num_layers):
    """The layers of the model's capturing ``TopK`` modules (SGLang keys capture by
    ``TopK.layer_id``); None (every layer) when it has none."""
    layers = set()
    modules = model.modules() if hasattr(model, "modules") else ()
    for module in modules:
        config = getattr(module, "topk_config", None)
        layer = getattr(module, "layer_id", None)
        if (config is not None and getattr(config, "allow_routed_experts_capture", True)
                and isinstance(layer, int) and 0 <= layer < num_layers):
            layers.add(layer)
    return sorted(layers) or None


def _num_experts_of(model, model_config):
    get = getattr(type(model), "get_model_config_for_expert_location", None) if model else None
    if get is not None:
        try:
            found = get(model_config.hf_config)
            if found is not None:
                return int(found.num_logical_experts)
        except Exception:  # noqa: BLE001 - fall back to the HF config
            pass
    text = model_config.hf_text_config
    for name in ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts"):
        value = getattr(text, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None
