"""Record a vLLM (0.33.0) model's routing into a moestat recorder: exact counts, logical ids.

    import moestat
    from moestat.vllm import recording

    model = worker.model_runner.get_model()            # vLLM's nn.Module, in its worker
    topology = recording.topology_from_model(model)    # or topology_from_vllm_config(...)
    recorder = moestat.CudaRecorder(topology)          # CpuRecorder for a model on the CPU
    recorder.start()
    handle = recording.attach(model, recorder)         # every forward of model: one pass
    ...
    counts = recorder.snapshot().logical_counts        # [passes, layers, experts]
    handle.detach()

Where the ids come from. vLLM's routers (``BaseRouter`` subclasses, base_router.py) call a
capture function, set by ``BaseRouter.set_capture_fn(fn)``, in ``_select_experts`` with the
logical ``topk_ids`` ``[tokens, top_k]`` (int32 or int64), after ``_compute_routing`` and
before EPLB maps them to physical slots: the ids moestat counts, whatever vLLM's placement.
vLLM's own routed-experts capturer (routed_experts_capturer.py,
``bind_routed_experts_capturer``) uses the same hook, and so does this module: a router does
not know its layer; the ``MoERunner`` that holds it (``runner.router``) does, as
``runner.layer_id``, vLLM's ``extract_layer_index(runner.layer_name)``: the decoder layer's
index. Each capture function calls ``moestat.torch_ops.record_topk`` (a torch custom op under
torch.compile, so vLLM's compiled and CUDA-graph-captured forwards keep it).

Pass boundaries: a forward pre-hook and a forward hook on the module handed to ``attach``
(vLLM's model, which its model runner calls once per step inside ``set_forward_context``).
``attach(..., passes=False)`` leaves them to the caller (``handle.begin_pass()`` /
``handle.end_pass()``), e.g. around ``EplbState.step``, which vLLM calls once after each
forward but only with EPLB enabled.

Padding: vLLM pads a batch to a CUDA graph's size, padding rows last, and is told which rows
are real two ways, both device tensors at addresses stable across graph replays. The forward
context's ``is_padding`` mask (True for padding rows) is filled in place before every forward,
an idle data-parallel rank's dummy batch included (all padding); it counts where its length is
the router's rows. Otherwise, with EPLB enabled, ``eplb_state.num_unpadded_tokens_tensors[
dbo_current_ubatch_id()]`` (filled by ``EplbState.prepare_forward`` before each forward, not
before a dummy batch; per micro-batch under dual-batch overlap) does. The count is passed as
``num_valid_tokens``. Eagerly the capture function reads the mask; under torch.compile it calls
``moestat_vllm::record_topk``, an op whose implementation reads it where the op runs, as vLLM's
attention ops read their metadata (vLLM runs compiled code with Dynamo's guards dropped, and the
mask's length varies by batch): inside a CUDA graph capture that enqueues the count of the
mask's real rows, which each replay takes again from the mask.

Naive dispatch: where a MoE layer dispatches naively (``MoERunner.do_naive_dispatch_combine``:
data parallel, or sequence-parallel MoE, without all-to-all kernels), vLLM gathers the router
input of every rank of a group before routing, so every rank routes all of the group's rows.
Each rank records only its own chunk of them (its rows, padding included, where vLLM's
dispatcher put them, from the same host sizes), so its mask covers them and every token is
counted once, by the rank that holds it. Under sequence-parallel MoE each tensor-parallel rank
routes its share of the batch (vLLM's ``sequence_parallel_chunk``), and the mask's slice at the
share's offset counts its real rows.
"""

import logging
from typing import Optional

import torch

from .. import torch_ops
from .._core import Error, ModelTopology, Recorder
from ..engines.devices import check_recorder_device, device_of
from ..engines.faults import Faults
from ..engines.topology import check_routers

logger = logging.getLogger(__name__)


def find_moe_runners(model: torch.nn.Module) -> dict:
    """{decoder layer index: vLLM MoE layer} for every MoE layer of model: each ``MoERunner`` (or
    any module with a ``router`` and a ``layer_name``, as vLLM's MoE layers have) whose router
    takes a capture function. Raises moestat.Error when there is none."""
    from vllm.model_executor.layers.fused_moe.router.base_router import BaseRouter

    runners = {}
    for name, module in model.named_modules():
        router = getattr(module, "router", None)
        if not isinstance(router, BaseRouter) or not hasattr(module, "layer_name"):
            continue
        layer = _layer_index(module)
        if layer in runners and runners[layer].router is not router:
            raise Error(f"{type(model).__name__}: decoder layer {layer} has two routers "
                        f"({name})")
        runners[layer] = module
    if not runners:
        raise Error(f"{type(model).__name__}: no vLLM MoE layer with a BaseRouter "
                    "(monolithic MoE kernels route inside the kernel: not supported)")
    return runners


def find_routers(model: torch.nn.Module) -> dict:
    """{decoder layer index: vLLM router} of find_moe_runners(model)."""
    return {layer: runner.router for layer, runner in find_moe_runners(model).items()}


def _layer_index(module) -> int:
    layer = getattr(module, "layer_id", None)
    if layer is None:
        from vllm.model_executor.models.utils import extract_layer_index

        layer = extract_layer_index(module.layer_name)
    return int(layer)


def topology_from_model(model: torch.nn.Module, num_layers=None, **topology_args) -> ModelTopology:
    """The ModelTopology of a vLLM model from its routers: MoE layers where they sit, their
    experts (``global_num_experts``) and ``top_k``. num_layers: the decoder layers (default:
    the last MoE layer + 1; pass vLLM's ``model_config.get_total_num_hidden_layers()``)."""
    routers = find_routers(model)
    experts = {router.global_num_experts for router in routers.values()}
    top_ks = {router.top_k for router in routers.values()}
    if len(experts) != 1 or len(top_ks) != 1:
        raise Error(f"{type(model).__name__}: routers disagree on experts {sorted(experts)} "
                    f"or top_k {sorted(top_ks)}")
    if num_layers is None:
        num_layers = max(routers) + 1
    moe_layers = [layer in routers for layer in range(num_layers)]
    return ModelTopology(num_layers, experts.pop(), top_ks.pop(), moe_layers=moe_layers,
                         **topology_args)


def topology_from_vllm_config(vllm_config, moe_layers=None, **topology_args) -> ModelTopology:
    """The ModelTopology from vLLM's config (``VllmConfig`` or its ``model_config``):
    ``get_total_num_hidden_layers()``, ``get_num_experts()``, ``get_num_experts_per_tok()``.
    moe_layers: the decoder layers that are MoE (indices or booleans; default every layer;
    ``topology_from_model`` finds them)."""
    model_config = getattr(vllm_config, "model_config", vllm_config)
    num_layers = model_config.get_total_num_hidden_layers()
    if moe_layers is not None and not all(isinstance(m, bool) for m in moe_layers):
        indices = set(moe_layers)
        moe_layers = [layer in indices for layer in range(num_layers)]
    return ModelTopology(num_layers, model_config.get_num_experts(),
                         model_config.get_num_experts_per_tok(), moe_layers=moe_layers,
                         **topology_args)


def _eplb_num_valid_tokens(router):
    """EPLB's one-element int32 count of the real leading rows, or None without EPLB."""
    eplb_state = getattr(router, "eplb_state", None)
    tensors = getattr(eplb_state, "num_unpadded_tokens_tensors", None)
    if tensors is None:
        return None
    from vllm.v1.worker.ubatching import dbo_current_ubatch_id

    return tensors[dbo_current_ubatch_id()].reshape(1)


def _forward_context_num_valid_tokens(handle, topk_ids, sequence_parallel=False):
    """The real rows the forward context's is_padding mask counts (a one-element int32 tensor),
    or None where there is no mask of topk_ids' rows; counted at the pass's first layer and
    kept in handle for the others. Padding rows come last (vLLM pads a batch
    at its end). sequence_parallel: the router's rows are this tensor-parallel rank's share of
    the batch (vLLM's ``sequence_parallel_chunk``: the batch padded to a multiple of the
    tensor-parallel size, the rank's slice of it), so the share's slice of the mask counts."""
    try:
        from vllm.forward_context import get_forward_context, is_forward_context_available
    except ImportError:
        return None
    if not is_forward_context_available():
        return None
    is_padding = getattr(get_forward_context(), "is_padding", None)
    if not isinstance(is_padding, torch.Tensor):
        return None
    start, stop = 0, is_padding.shape[0]
    if sequence_parallel:
        from vllm.distributed import (get_tensor_model_parallel_rank,
                                      get_tensor_model_parallel_world_size)

        share = -(-stop // get_tensor_model_parallel_world_size())
        start = get_tensor_model_parallel_rank() * share
        stop = start + share  # past the mask's end: rows the chunk padded, not real
    if stop - start != topk_ids.shape[0]:
        return None
    known = handle.mask_count
    if known is None or known[0] is not is_padding or known[1] != start:
        real = (~is_padding[start:stop]).sum(dtype=torch.int32).reshape(1)
        handle.mask_count = known = (is_padding, start, real)
    return known[2]


def _own_rows(faults, topk_ids, sequence_parallel: bool):
    """This rank's own rows of a router's ids where its MoE layer dispatches naively
    (``MoERunner.do_naive_dispatch_combine``): vLLM's dispatcher gathered every rank's rows of
    its group before routing, each rank's padded rows in the group's rank order (all_gatherv,
    ``dispatch_router_logits``), so this rank's tokens, and its padding mask, are its chunk of
    them. The chunk's bounds are host numbers vLLM's dispatcher computed the gather with (its
    ``_get_comm_group`` and ``_get_sizes``, from the forward context): no device sync. None
    where they do not cover the rows (nothing of them is counted then: a fault)."""
    from vllm.distributed.parallel_state import get_ep_group

    communicator = getattr(get_ep_group(), "device_communicator", None)
    dispatcher = getattr(communicator, "all2all_manager", None)
    if dispatcher is None:
        faults.add("no_dispatcher", "a MoE layer dispatches naively but its expert-parallel "
                   "group has no all-to-all manager: its rows are not counted")
        return None
    rows = topk_ids.shape[0]
    try:
        group = dispatcher._get_comm_group(sequence_parallel)
        sizes = [int(size) for size in dispatcher._get_sizes(rows // group.world_size, group)]
    except (AssertionError, AttributeError) as error:  # vLLM's checks: no forward context...
        faults.add("gathered_rows", f"vLLM's dispatcher gave no sizes for a router of "
                   f"gathered rows ({error!r}): the rows are not counted")
        return None
    if sum(sizes) != rows:
        faults.add("gathered_rows", f"a router of gathered rows has {rows} rows, but vLLM's "
                   f"dispatcher gathered {sizes} over its group: the rows are not counted")
        return None
    start = sum(sizes[:group.rank_in_group])
    return topk_ids[start:start + sizes[group.rank_in_group]]


def _num_valid_tokens(handle, topk_ids, eplb_valid, sequence_parallel=False):
    """The forward context's count where its mask covers topk_ids' rows (it is filled for every
    forward, dummy batches included, where EPLB's count is left from the step before), else
    EPLB's (also per micro-batch), else None: every row counts."""
    from_mask = _forward_context_num_valid_tokens(handle, topk_ids, sequence_parallel)
    return eplb_valid if from_mask is None else from_mask


def _record_own_rows(record, handle, layer, topk_ids, eplb_valid, gathered,
                     sequence_parallel) -> None:
    """record (torch_ops.record_topk or record_topk_now) of this rank's rows (_own_rows where
    gathered) with their valid rows (_num_valid_tokens); what the recorder refuses is a fault
    of handle's."""
    if gathered:
        topk_ids = _own_rows(handle.faults, topk_ids, sequence_parallel)
        if topk_ids is None:
            return
    try:
        record(handle.token, handle.recorder_id, layer, topk_ids,
               _num_valid_tokens(handle, topk_ids, eplb_valid, sequence_parallel))
    except Error as error:
        handle.faults.add("record_topk", error)


# The attached handles by recorder id: the op below is handed the id (ops take no objects).
_handles = {}


@torch.library.custom_op("moestat_vllm::record_topk", mutates_args=("token",))
def _record_topk_op(token: torch.Tensor, recorder_id: int, layer: int, topk_ids: torch.Tensor,
                    eplb_valid: Optional[torch.Tensor] = None, gathered: bool = False,
                    sequence_parallel: bool = False) -> None:
    """moestat::record_topk of this rank's rows with their valid rows, both found where the op
    runs (_record_own_rows), counted at once (compiled code reuses buffers)."""
    handle = _handles.get(recorder_id)
    if handle is None:
        raise Error(f"moestat_vllm op: no recording attached under id {recorder_id} (detached?)")
    _record_own_rows(torch_ops.record_topk_now, handle, layer, topk_ids, eplb_valid, gathered,
                     sequence_parallel)


@_record_topk_op.register_fake
def _(token, recorder_id, layer, topk_ids, eplb_valid=None, gathered=False,
      sequence_parallel=False):
    return None


class _Capture:
    """The capture function of one router: records this rank's logical ids under its layer.
    runner: the vLLM MoE layer holding the router, whose dispatch decides which rows are this
    rank's (_own_rows)."""

    def __init__(self, handle, layer, runner):
        self.handle = handle
        self.layer = layer
        self.router = runner.router
        self.gathered = bool(getattr(runner, "do_naive_dispatch_combine", False))
        self.sequence_parallel = bool(getattr(getattr(runner, "moe_config", None),
                                              "is_sequence_parallel", False))

    def __call__(self, topk_ids: torch.Tensor) -> None:
        handle = self.handle
        eplb_valid = _eplb_num_valid_tokens(self.router)
        if torch.compiler.is_compiling():
            torch.ops.moestat_vllm.record_topk(handle.token, handle.recorder_id, self.layer,
                                               topk_ids, eplb_valid, self.gathered,
                                               self.sequence_parallel)
            return
        _record_own_rows(torch_ops.record_topk, handle, self.layer, topk_ids, eplb_valid,
                         self.gathered, self.sequence_parallel)


class RecordingHandle:
    """What attach() installed; detach() (or leaving the with block) removes it. faults: the
    recording faults inside vLLM's forwards, {kind: count}, each kind logged once and never
    raised: ``gathered_rows`` and ``no_dispatcher`` (naive dispatch whose gathered rows this
    rank cannot find), ``record_topk``, ``begin_pass``, ``end_pass`` (what the recorder
    refused, moestat.Error's message logged)."""

    def __init__(self, model, recorder: Recorder, runners: dict, device, passes: bool):
        self.model = model
        self.recorder = recorder
        self.routers = {layer: runner.router for layer, runner in runners.items()}
        self.layers = sorted(runners)
        self.faults = Faults(logger, "RecordingHandle.faults")
        # (the forward context's is_padding mask, the first row counted, its real rows):
        # counted at the pass's first layer and shared by the others, not two kernels per
        # layer; forgotten when a pass begins, since vLLM refills the mask in place.
        self.mask_count = None
        self.recorder_id = torch_ops.register(recorder)
        self.token = torch_ops.ordering_token(device)
        _handles[self.recorder_id] = self
        self._previous = {}
        for layer, runner in runners.items():
            self._previous[layer] = runner.router.capture_fn
            runner.router.set_capture_fn(_Capture(self, layer, runner))
        self._hooks = []
        if passes:
            self._hooks = [
                model.register_forward_pre_hook(self._begin_pass_hook),
                model.register_forward_hook(self._end_pass_hook, always_call=True),
            ]

    def begin_pass(self) -> None:
        self.mask_count = None
        torch_ops.begin_pass(self.token, self.recorder_id)

    def end_pass(self) -> None:
        torch_ops.end_pass(self.token, self.recorder_id)

    def abort_pass(self) -> None:
        torch_ops.abort_pass(self.token, self.recorder_id)

    # The hooks run inside vLLM's forward: what the recorder refuses there is a fault, not an
    # exception (begin_pass, end_pass and abort_pass called directly raise moestat.Error).
    def _begin_pass_hook(self, module, args):
        try:
            self.begin_pass()
        except Error as error:
            self.faults.add("begin_pass", error)

    def _end_pass_hook(self, module, args, output):
        try:
            if output is None:  # the forward raised: discard the pass
                self.abort_pass()
            else:
                self.end_pass()
        except Error as error:
            self.faults.add("end_pass", error)

    def detach(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        for layer, router in self.routers.items():
            if isinstance(router.capture_fn, _Capture) and router.capture_fn.handle is self:
                router.set_capture_fn(self._previous.get(layer))
        torch_ops.unregister(self.recorder_id)
        _handles.pop(self.recorder_id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.detach()


def attach(model: torch.nn.Module, recorder: Recorder, *, passes: bool = True,
           device=None) -> RecordingHandle:
    """Records model's routing (a vLLM model, or any module holding vLLM MoE layers) into
    recorder: each router's logical top-k ids under its decoder layer's index, every forward of
    model one pass (passes=False: the caller calls handle.begin_pass()/end_pass()). Replaces
    the routers' capture functions (vLLM's routed-experts capture uses the same slot: not both
    at once); detach() restores them. recorder's topology must match (topology_from_model);
    CpuRecorder on the CPU, CudaRecorder on a GPU. device: where the model runs (default: its
    first parameter's, else the CPU)."""
    runners = find_moe_runners(model)
    routers = {layer: runner.router for layer, runner in runners.items()}
    check_routers(model, recorder.topology, routers, experts_attribute="global_num_experts")
    device = device_of(model) if device is None else torch.device(device)
    check_recorder_device(recorder, device, type(model).__name__)
    return RecordingHandle(model, recorder, runners, device, passes)
