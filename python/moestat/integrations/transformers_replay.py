"""Rollout Routing Replay (R3, arXiv 2510.11370) for Hugging Face ``transformers`` (5.x) MoE
models: a training forward routes every token to the experts the inference engine chose for
it, while the routing weights come from the trained router's own current scores, so the
router still gets gradients.

    from moestat.integrations import transformers_replay

    with transformers_replay.replay(model) as handle:
        handle.set_routes(rollout_ids, valid=attention_mask.bool())  # [batch, seq, layers, k]
        loss = loss_fn(model(input_ids, attention_mask=attention_mask).logits)
        loss.backward()
    handle.agreement()   # how often the router's own top-k is the rollout's

Every router moestat supports (moestat.integrations.transformers.SUPPORTED_ROUTERS) computes
its top-k with one ``torch.topk`` over the experts' scores and its weights from the ids that
top-k returns. Replay runs each router's own forward under a torch function mode in which
that top-k returns the recorded ids, and as values the scores at those ids: the family's own
code then computes the weights it would have computed had it chosen those experts (softmax
over all logits gathered and renormalised iff norm_topk_prob for Mixtral, Qwen-MoE and OLMoE;
DeepSeek-V3's sigmoid scores gathered, normalised and scaled; gpt-oss's softmax over the
gathered logits). The same code runs eagerly, under torch.compile(fullgraph=True) and inside
a CUDA graph: the forward reads the routes from fixed buffers that set_routes() fills and
checks, and does nothing on the host (docs/transformers.md).
"""

import dataclasses
import functools

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from .._core import Error
from ..engines.devices import device_of
from .forward_hooks import forward_inputs
from .transformers import find_routers


@dataclasses.dataclass(frozen=True)
class Agreement:
    """How often the routers' live top-k (what they would have chosen) equals the replayed
    one, over the valid tokens of the forwards since the last reset_agreement().

    per_layer[layer]: for the MoE layer of that decoder-layer index, the fraction of its
    valid tokens whose live top-k set equals the recorded set (nan with no valid token).
    any_flip_fraction: the fraction of tokens, valid in at least one MoE layer, whose live set
    differs from the recorded one in at least one layer where they are valid (nan without
    tokens). num_tokens: those tokens (a token forwarded twice counts twice)."""

    per_layer: dict
    any_flip_fraction: float
    num_tokens: int


class _ForcedTopK(TorchFunctionMode):
    """Entered around one router's forward: its top-k over the experts returns ``ids`` where
    ``valid`` and the live choice elsewhere, with the router's own scores at those ids as
    values. Other torch calls pass through.

    forced: [tokens, top_k] int64 expert ids; valid: [tokens] bool. After the forward,
    live_ids is the top-k the router computed ([tokens, top_k] int64), None if it made none.

    The expert top-k is recognised by its shape: a top-k of top_k over the last dimension of
    a 2-D [tokens, num_experts] tensor, largest first. DeepSeek-V3's other top-ks are over
    groups ([tokens, groups, experts per group] and [tokens, groups]; a group holds at least
    two experts, so groups != experts)."""

    def __init__(self, num_experts: int, top_k: int, forced: torch.Tensor,
                 valid: torch.Tensor):
        super().__init__()
        self.num_experts = num_experts
        self.top_k = top_k
        self.forced = forced
        self.valid = valid
        self.live_ids = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not torch.topk and func is not torch.Tensor.topk:
            return func(*args, **kwargs)
        scores = args[0]
        k = args[1] if len(args) > 1 else kwargs.get("k")
        dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
        largest = args[3] if len(args) > 3 else kwargs.get("largest", True)
        live = func(*args, **kwargs)
        if not (scores.dim() == 2 and scores.shape[1] == self.num_experts and k == self.top_k
                and dim in (-1, 1) and largest):
            return live
        if self.live_ids is not None:
            raise Error("replay: a router made two top-k choices over its experts: "
                        "moestat cannot tell which to force")
        if scores.shape[0] != self.forced.shape[0]:
            raise Error(f"replay: the router saw {scores.shape[0]} tokens, the routes set "
                        f"have {self.forced.shape[0]}")
        self.live_ids = live[1]
        ids = torch.where(self.valid.unsqueeze(-1), self.forced, self.live_ids)
        # NOTE: the values are the router's scores gathered at the chosen ids, through which
        # the weights (and their gradients) are computed; for the live ids they equal what
        # topk returned, bit for bit.
        return torch.return_types.topk((scores.gather(-1, ids), ids))


class ReplayHandle:
    """Routes a model's forwards along recorded routes; replay() makes it. detach() (or
    leaving the with block) restores the routers.

    layers: the decoder-layer indices of the MoE layers, ascending: the routes' columns.
    num_experts, top_k: those of every router."""

    def __init__(self, model: torch.nn.Module, routers: dict):
        self.model = model
        self.layers = sorted(routers)
        self._routers = [routers[layer] for layer in self.layers]
        self.num_experts = _same_in_every_router(model, routers, "num_experts")
        self.top_k = _same_in_every_router(model, routers, "top_k")
        self._device = device_of(model)
        # The routes, in buffers that set_routes() copies into while the token count stays,
        # so a captured CUDA graph reads the new ones: [layers, tokens, top_k] ids (int16, or
        # int32 past 32767 experts: a quarter of int64's memory, widened per layer in the
        # forward), [layers, tokens] valid, and the (batch, seq) they were given as, if so.
        self._ids = None
        self._valid = None
        self._batch_shape = None
        # [layers, tokens] bool, written by each router: its live top-k set is the forced one.
        self._matches = None
        # Agreement sums, added to at the end of each forward of the model, on its device:
        # per layer, valid tokens whose live set matched and valid tokens; tokens valid in some
        # layer with a differing set in some layer, and tokens valid in some layer.
        num_layers = len(self.layers)
        self._matching = _static(torch.zeros(num_layers, dtype=torch.int64, device=self._device))
        self._counted = _static(torch.zeros(num_layers, dtype=torch.int64, device=self._device))
        self._flipped = _static(torch.zeros((), dtype=torch.int64, device=self._device))
        self._tokens = _static(torch.zeros((), dtype=torch.int64, device=self._device))

        for layer, router in zip(self.layers, self._routers):
            if _is_replayed(router):
                raise Error(f"{type(model).__name__}: decoder layer {layer}'s router is "
                            "already replayed (detach that handle first)")
        self._hooks = [
            model.register_forward_pre_hook(self._check_inputs, with_kwargs=True),
            model.register_forward_hook(self._add_agreement),
        ]
        # Each router's own forward, if something set one on the instance, else None (the
        # class's): detach() puts it back.
        self._original_forwards = [router.__dict__.get("forward") for router in self._routers]
        for column, router in enumerate(self._routers):
            router.forward = functools.partial(self._forward_router, column, router.forward)

    def set_routes(self, ids, valid=None) -> None:
        """The routes of the next forwards (until set again).

        ids: [batch, seq, moe_layers, top_k] or [tokens, moe_layers, top_k] (a flattened
        batch, tokens = batch * seq in row order), any integer dtype, on any device: logical
        expert ids in [0, num_experts), distinct within a token's top-k; the columns are the
        MoE layers in ascending decoder-layer order (self.layers). The forward's input must
        have that batch and seq (or batch * seq tokens).
        valid: None (every route is used) or bool, ids.shape[:-1] (per token and layer) or
        ids.shape[:-2] (per token, e.g. attention_mask.bool()). Where False (padding, a
        route not recorded) the router's own choice is used and ids are not checked.

        Raises moestat.Error naming the problem (shape, dtype, an id out of range, an id twice
        in a top-k). Checking the ids reads them: one synchronisation with the device, here
        rather than in the forward. The buffers keep their address while the token count does
        not change, so a forward captured in a CUDA graph replays the routes set last."""
        ids, valid, batch_shape = self._checked(ids, valid)
        # Ids not used are zeroed, so the buffers hold only experts that exist.
        ids = ids.masked_fill(~valid.unsqueeze(-1), 0)
        ids = ids.to(torch.int16 if self.num_experts <= 32767 else torch.int32)
        ids = ids.permute(1, 0, 2)  # [layers, tokens, top_k]: a layer's rows contiguous
        valid = valid.permute(1, 0)
        if self._ids is None or self._ids.shape != ids.shape:
            self._ids = _static(torch.empty_like(ids, memory_format=torch.contiguous_format))
            self._valid = _static(torch.empty_like(valid, memory_format=torch.contiguous_format))
            self._matches = _static(torch.ones_like(self._valid))
        self._ids.copy_(ids)
        self._valid.copy_(valid)
        self._batch_shape = batch_shape

    def agreement(self) -> Agreement:
        """The agreement since the last reset_agreement() (synchronises with the device)."""
        matching, counted = self._matching.tolist(), self._counted.tolist()
        flipped, tokens = int(self._flipped), int(self._tokens)
        nan = float("nan")
        return Agreement(
            per_layer={layer: matching[column] / counted[column] if counted[column] else nan
                       for column, layer in enumerate(self.layers)},
            any_flip_fraction=flipped / tokens if tokens else nan,
            num_tokens=tokens)

    def reset_agreement(self) -> None:
        """Zeroes the agreement sums (in place: a captured graph keeps adding to them)."""
        for total in (self._matching, self._counted, self._flipped, self._tokens):
            total.zero_()

    def detach(self) -> None:
        """Restores the routers' forwards and removes the hooks."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        for router, original in zip(self._routers, self._original_forwards):
            if original is None:
                router.__dict__.pop("forward", None)
            else:
                router.forward = original
        self._original_forwards = []

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.detach()

    def _checked(self, ids, valid):
        """ids as [tokens, layers, top_k] int64 and valid as [tokens, layers] bool on the
        model's device, and the (batch, seq) of 4-D ids (else None); raises moestat.Error."""
        ids = _as_tensor(ids, "ids")
        if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
            raise Error(f"routes: ids must be an integer tensor (expert ids), got {ids.dtype}")
        if ids.dim() not in (3, 4):
            raise Error("routes: ids must be [batch, seq, moe_layers, top_k] or [tokens, "
                        f"moe_layers, top_k], got shape {tuple(ids.shape)}")
        num_layers = len(self.layers)
        if ids.shape[-2] != num_layers:
            raise Error(f"routes: ids have {ids.shape[-2]} MoE-layer columns (dimension "
                        f"{ids.dim() - 2}), the model has {num_layers} MoE layers (decoder "
                        f"layers {self.layers}); routes over every decoder layer: select "
                        "ids[..., handle.layers, :]")
        if ids.shape[-1] != self.top_k:
            raise Error(f"routes: ids have top-k {ids.shape[-1]} (last dimension), the model's "
                        f"routers pick {self.top_k}")
        batch_shape = tuple(ids.shape[:2]) if ids.dim() == 4 else None
        if valid is None:
            valid = torch.ones(ids.shape[:-1], dtype=torch.bool, device=self._device)
        else:
            valid = _as_tensor(valid, "valid")
            if valid.dtype != torch.bool:
                raise Error(f"routes: valid must be a bool tensor, got {valid.dtype} (for a "
                            "mask of 0 and 1: valid=mask != 0)")
            if valid.shape == ids.shape[:-2]:
                valid = valid.unsqueeze(-1).expand(ids.shape[:-1])
            elif valid.shape != ids.shape[:-1]:
                raise Error(f"routes: valid has shape {tuple(valid.shape)}, ids "
                            f"{tuple(ids.shape)}: valid must be {tuple(ids.shape[:-1])} (per "
                            f"token and layer) or {tuple(ids.shape[:-2])} (per token)")
        ids = ids.to(self._device, torch.int64).reshape(-1, num_layers, self.top_k)
        valid = valid.to(self._device).reshape(-1, num_layers)
        out_of_range = ((ids < 0) | (ids >= self.num_experts)).any(-1) & valid
        ordered = ids.sort(-1).values
        repeated = (ordered[..., 1:] == ordered[..., :-1]).any(-1) & valid
        # One synchronisation when the routes are fine; locating a fault takes more.
        if bool((out_of_range | repeated).any()):
            bad_range = bool(out_of_range.any())
            token, column = (out_of_range if bad_range else repeated).nonzero()[0].tolist()
            where = self._position(token, column, batch_shape)
            top_k = ids[token, column].tolist()
            if bad_range:
                expert = next(e for e in top_k if not 0 <= e < self.num_experts)
                raise Error(f"routes: expert id {expert} out of range [0, {self.num_experts}) "
                            f"at {where}: {top_k}")
            expert = next(e for e in top_k if top_k.count(e) > 1)
            raise Error(f"routes: expert {expert} twice in the top-k at {where}: {top_k}")
        return ids, valid, batch_shape

    def _position(self, token: int, column: int, batch_shape) -> str:
        layer = f"(decoder layer {self.layers[column]})"
        if batch_shape is None:
            return f"ids[{token}, {column}] {layer}"
        return f"ids[{token // batch_shape[1]}, {token % batch_shape[1]}, {column}] {layer}"

    def _check_inputs(self, model, args, kwargs):
        """Before each forward of the model: routes are set and fit its input (shapes only:
        nothing is read from the device)."""
        if self._ids is None:
            raise Error("replay: no routes set: call handle.set_routes(ids) before the forward")
        tokens, _ = forward_inputs(args, kwargs)
        if not isinstance(tokens, torch.Tensor):
            return
        shape = tuple(tokens.shape[:2])
        if self._batch_shape is not None and shape != self._batch_shape:
            raise Error(f"replay: the routes are for [batch, seq] = {list(self._batch_shape)}, "
                        f"the forward's input is {list(shape)}")
        if shape[0] * shape[1] != self._ids.shape[1]:
            raise Error(f"replay: the routes have {self._ids.shape[1]} tokens, the forward's "
                        f"input {list(shape)} has {shape[0] * shape[1]}")

    def _forward_router(self, column, original_forward, *args, **kwargs):
        """The router's forward, its expert top-k forced to the routes of MoE-layer column."""
        if self._ids is None:
            raise Error("replay: no routes set: call handle.set_routes(ids) before the forward")
        router = self._routers[column]
        forced = self._ids[column].to(router.weight.device, torch.int64)
        valid = self._valid[column].to(router.weight.device)
        mode = _ForcedTopK(self.num_experts, self.top_k, forced, valid)
        with mode:
            output = original_forward(*args, **kwargs)
        if mode.live_ids is None:
            raise Error(f"replay: the router of decoder layer {self.layers[column]} "
                        f"({type(router).__name__}) made no top-k over its experts: this "
                        "transformers version routes differently, moestat cannot force it")
        with torch.no_grad():
            # Sets of distinct ids: equal iff every forced id is among the live ones.
            same = (forced.unsqueeze(-1) == mode.live_ids.unsqueeze(-2)).any(-1).all(-1)
            self._matches[column].copy_(same)
        return output

    def _add_agreement(self, model, args, output):
        with torch.no_grad():
            valid = self._valid
            self._matching.add_((self._matches & valid).sum(1))
            self._counted.add_(valid.sum(1))
            self._flipped.add_((~self._matches & valid).any(0).sum())
            self._tokens.add_(valid.any(0).sum())


def replay(model: torch.nn.Module, ids=None, valid=None) -> ReplayHandle:
    """Forces the routes of model (a transformers MoE model: Mixtral, Qwen2/3-MoE, DeepSeek-V3,
    OLMoE, gpt-oss): in every forward, each MoE router's top-k ids are the routes set with
    handle.set_routes() (or ids and valid here, the same arguments), and its weights what the
    router computes from its own current scores at those ids; gradients reach the routers'
    weights through them. Returns the handle (a context manager that detaches on exit).
    Raises moestat.Error for a model without supported routers, or routes that do not fit."""
    handle = ReplayHandle(model, find_routers(model))
    if ids is not None:
        try:
            handle.set_routes(ids, valid)
        except Error:
            handle.detach()
            raise
    return handle


def _same_in_every_router(model, routers: dict, attribute: str) -> int:
    values = {getattr(router, attribute) for router in routers.values()}
    if len(values) != 1:
        raise Error(f"{type(model).__name__}: its routers differ in {attribute} "
                    f"({sorted(values)}); replay needs one value")
    return values.pop()


def _static(buffer: torch.Tensor) -> torch.Tensor:
    """buffer, marked for torch.compile as keeping its address (as set_routes keeps it): a
    model compiled with mode="reduce-overhead" reads it in place and may write it (the
    agreement) inside its CUDA graphs, which an input without that mark would keep the
    forward out of."""
    torch._dynamo.mark_static_address(buffer)
    return buffer


def _is_replayed(router: torch.nn.Module) -> bool:
    forward = router.__dict__.get("forward")
    return (isinstance(forward, functools.partial)
            and getattr(forward.func, "__func__", None) is ReplayHandle._forward_router)


def _as_tensor(value, name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    raise Error(f"routes: {name} must be a torch.Tensor or numpy array, got "
                f"{type(value).__name__}")
