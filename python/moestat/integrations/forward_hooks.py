"""Hooks around a transformers model's forwards and its routers: the frame every recording of
a transformers model shares (counting, ``transformers.attach``; routes,
``transformers_routes.capture``)."""

import abc
import functools

import torch


class ForwardHooks(abc.ABC):
    """Calls ``_begin_pass(model, args, kwargs)`` before each forward of ``model``,
    ``_on_router(layer, router, args, output)`` after each router's, and
    ``_end_pass(model, args, output)`` after the model's, also when it raised (``output``
    None then); detach() (or leaving the with block) removes them.

    ``routers``: {decoder layer index: router module}.
    """

    def __init__(self, model: torch.nn.Module, routers: dict):
        self._hooks = [
            model.register_forward_pre_hook(self._begin_pass, with_kwargs=True),
            # always_call: a forward that raises still closes its pass (discarding it), so the
            # next can open.
            model.register_forward_hook(self._end_pass, always_call=True),
        ]
        self._hooks += [
            router.register_forward_hook(functools.partial(self._on_router, layer))
            for layer, router in routers.items()
        ]

    def detach(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.detach()

    @abc.abstractmethod
    def _begin_pass(self, model, args, kwargs):
        """See the class."""

    @abc.abstractmethod
    def _on_router(self, layer, router, args, output):
        """See the class."""

    @abc.abstractmethod
    def _end_pass(self, model, args, output):
        """See the class."""


def forward_inputs(args, kwargs):
    """(tokens, attention mask) of a model forward's arguments: ``input_ids`` (else
    ``inputs_embeds``; None without either) and ``attention_mask`` (None without one)."""
    mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
    tokens = kwargs.get("input_ids", args[0] if args else None)
    if tokens is None:
        tokens = kwargs.get("inputs_embeds")
    return tokens, mask
