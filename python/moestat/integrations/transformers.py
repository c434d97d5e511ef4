"""Record the routing of a Hugging Face ``transformers`` (5.x) MoE model with one call.

    import moestat
    from moestat.integrations import transformers as moestat_hf

    recorder = moestat.CpuRecorder(moestat_hf.topology_from_config(model.config))
    recorder.start()
    with moestat_hf.attach(model, recorder):
        model.generate(**inputs, max_new_tokens=16)   # prefill and every decode step: a pass
    counts = recorder.snapshot().logical_counts         # [passes, layers, experts]

Every MoE layer of these models has a router module that returns ``(logits, weights,
top_k_ids)``; a forward hook on it records the ids under the index of the decoder layer it
sits in. A pass opens at the first MoE layer's router and closes at the last one's (see
RecordingHandle); hooks on the model itself find the padding rows before each forward and
discard the pass of a forward that raised. Hooks call moestat's torch ops
(``moestat.torch_ops``; eagerly, their implementation directly), so a model compiled with
``torch.compile(fullgraph=True)`` or captured in a CUDA graph records too
(docs/transformers.md).
"""

import re

import torch

from .. import torch_ops
from .._core import Error, ModelTopology, Recorder
from ..engines.devices import check_recorder_device, device_of
from ..engines.topology import check_routers
from .forward_hooks import ForwardHooks, forward_inputs
from .transformers_versions import check_transformers_version

# Router classes whose forward returns (router_logits, routing_weights, top_k_ids), with
# top_k_ids [tokens, top_k] in the order of the flattened [batch, sequence] tokens.
SUPPORTED_ROUTERS = frozenset({
    "DeepseekV3TopkRouter",
    "GptOssTopKRouter",
    "MixtralTopKRouter",
    "OlmoeTopKRouter",
    "Qwen2MoeTopKRouter",
    "Qwen3MoeTopKRouter",
})
TOP_K_IDS = 2  # position of the ids in a router's output

# The decoder layer a module sits in: transformers names them <prefix>.layers.<index>.
_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def topology_from_config(config, **topology_args) -> ModelTopology:
    """The ModelTopology of a transformers MoE config: its decoder layers, which of them are
    MoE (DeepSeek-V3's first_k_dense_replace, Qwen-MoE's decoder_sparse_step and
    mlp_only_layers; every layer otherwise), routed experts and top-k. topology_args (e.g.
    ep_size, num_nodes, num_groups, num_physical_experts) go to ModelTopology."""
    text = config.get_text_config()
    num_layers = text.num_hidden_layers
    num_experts = _first_attribute(text, ("n_routed_experts", "num_local_experts", "num_experts"))
    top_k = _first_attribute(text, ("num_experts_per_tok",))
    moe_layers = [_is_moe_layer(text, layer) for layer in range(num_layers)]
    return ModelTopology(num_layers, num_experts, top_k, moe_layers=moe_layers, **topology_args)


def _first_attribute(config, names):
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    raise Error(f"{type(config).__name__} has none of {', '.join(names)}: not an MoE config?")


def _is_moe_layer(config, layer: int) -> bool:
    first_k_dense = getattr(config, "first_k_dense_replace", None)
    if first_k_dense is not None:
        return layer >= first_k_dense
    sparse_step = getattr(config, "decoder_sparse_step", None)
    if sparse_step is not None:
        dense_layers = getattr(config, "mlp_only_layers", None) or ()
        return layer not in dense_layers and (layer + 1) % sparse_step == 0
    return True


def find_routers(model: torch.nn.Module) -> dict:
    """{decoder layer index: router module} for every MoE layer of model; raises
    moestat.Error naming the model's class when it has none that moestat recognises."""
    routers = {}
    for name, module in model.named_modules():
        if type(module).__name__ not in SUPPORTED_ROUTERS:
            continue
        match = _LAYER_INDEX.search(name)
        if match is None:
            raise Error(f"{type(model).__name__}: router {name} is not inside a decoder layer "
                        "(<prefix>.layers.<index>)")
        layer = int(match.group(1))
        if layer in routers:
            raise Error(f"{type(model).__name__}: decoder layer {layer} has two routers")
        routers[layer] = module
    check_transformers_version(model, routers)  # an older one's routers return other things
    if not routers:
        raise Error(f"{type(model).__name__}: no MoE router that moestat recognises "
                    f"(supported: {', '.join(sorted(SUPPORTED_ROUTERS))})")
    return routers


class RecordingHandle(ForwardHooks):
    """The hooks attach() put on a model; detach() (or leaving the with block) removes them.

    A forward's pass opens in the hook of its first MoE layer's router and closes in the hook
    of its last one's, not in hooks on the model: torch.compile compiles hooks on the module it
    compiles as graphs of their own, and under mode="reduce-overhead" CUDA graph trees warm up,
    record and replay each graph on its own schedule (a recompiled forward warms up again while
    the others replay), so a pass opened in one graph and recorded in another would find its
    host side closed. Opened and closed among the routers, the whole pass is in the forward's
    graph."""

    def __init__(self, model: torch.nn.Module, recorder: Recorder, routers: dict):
        self.model = model
        self.recorder = recorder
        self.layers = sorted(routers)
        self._recorder_id = torch_ops.register(recorder)
        self._token = torch_ops.ordering_token(device_of(model))
        # Per forward with padding: (the token rows, real ones first; how many are real).
        self._real_rows_first = None
        self._pass_open = False  # between the first router's hook and the last one's
        super().__init__(model, routers)

    def detach(self) -> None:
        super().detach()
        torch_ops.unregister(self._recorder_id)

    def _begin_pass(self, model, args, kwargs):
        self._real_rows_first = _real_rows_first(args, kwargs)

    def _on_router(self, layer, router, args, output):
        if layer == self.layers[0]:
            torch_ops.begin_pass(self._token, self._recorder_id)
            self._pass_open = True
        self._record(layer, output[TOP_K_IDS])
        if layer == self.layers[-1]:
            self._pass_open = False
            torch_ops.end_pass(self._token, self._recorder_id)

    def _record(self, layer, top_k_ids):
        if self._real_rows_first is None:
            torch_ops.record_topk(self._token, self._recorder_id, layer, top_k_ids)
            return
        order, num_real = self._real_rows_first
        if order.shape[0] != top_k_ids.shape[0]:
            raise Error(f"layer {layer}: the router saw {top_k_ids.shape[0]} tokens, the "
                        f"attention mask covers {order.shape[0]}")
        torch_ops.record_topk(self._token, self._recorder_id, layer,
                              top_k_ids.index_select(0, order), num_real)

    def _end_pass(self, model, args, output):
        self._real_rows_first = None
        if self._pass_open:
            # The forward raised between its first and last MoE layers (torch calls an
            # always_call hook with no output then): the pass is discarded, not committed
            # with the layers it reached.
            self._pass_open = False
            torch_ops.abort_pass(self._token, self._recorder_id)


def attach(model: torch.nn.Module, recorder: Recorder) -> RecordingHandle:
    """Records every forward of model (a transformers MoE model: Mixtral, Qwen2/3-MoE,
    DeepSeek-V3, OLMoE, gpt-oss) into recorder as one pass: the top-k ids of each MoE layer
    under its decoder layer's index. Tokens the 2-D attention mask marks as padding are not
    counted. recorder's topology must match the model (topology_from_config builds it);
    CpuRecorder for a model on the CPU, CudaRecorder for one on a GPU."""
    routers = find_routers(model)
    check_routers(model, recorder.topology, routers)
    check_recorder_device(recorder, device_of(model), type(model).__name__)
    return RecordingHandle(model, recorder, routers)


def _real_rows_first(args, kwargs):
    """For a forward whose 2-D attention mask ([batch, past + sequence]) marks padding: the
    indices of its [batch * sequence] token rows with the real ones first, and how many are
    real (a one-element tensor, so no host synchronisation and no shape that depends on the
    data: both stay valid inside a CUDA graph). None without such a mask: every row counts,
    also with masks transformers prepared (4-D, or a dict by layer type, as generate() passes
    them with a static cache), which do not say which tokens are padding."""
    tokens, mask = forward_inputs(args, kwargs)
    if not isinstance(mask, torch.Tensor) or tokens is None or mask.dim() != 2:
        return None
    # The mask spans the cached tokens too; this forward's tokens are its last columns.
    real = mask[:, -tokens.shape[1]:].reshape(-1) != 0
    order = torch.argsort(real.to(torch.int8), descending=True, stable=True)
    return order, real.sum(dtype=torch.int32).reshape(1)
