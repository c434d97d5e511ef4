"""Which hook counts: one count source per configuration, chosen as SGLang chooses its gatherer.

With DeepEP both ``on_select_experts`` and a DeepEP hook fire in every MoE layer; counting
both would double each layer's total, so exactly one of them is the source and the other is
ignored, as in SGLang 0.5.23 (``_SinglePassGatherer.init_new``).
"""

from __future__ import annotations

SELECT_EXPERTS = "select_experts"  # the router's top-k ids (every rank sees its tokens)
DEEPEP_LOW_LATENCY = "deepep_low_latency"  # masked_m: tokens each local expert received
DEEPEP_NORMAL = "deepep_normal"  # host counts of normal dispatch (stat_approx)
PER_TOKEN = "per_token"  # every token's top-k ids


def choose_count_source(config) -> str:
    """The source for ``config``; NotImplementedError where SGLang has no gatherer either."""
    if config.mode == "per_token":
        return PER_TOKEN
    if config.moe_a2a_backend == "mori":
        return DEEPEP_LOW_LATENCY
    if config.mode == "stat_approx":
        if config.moe_a2a_backend != "none" and config.deepep_mode == "normal":
            return DEEPEP_NORMAL
        raise NotImplementedError(
            "stat_approx records DeepEP normal-dispatch counts: it needs an all-to-all backend "
            f"with deepep_mode 'normal' (got moe_a2a_backend {config.moe_a2a_backend!r}, "
            f"deepep_mode {config.deepep_mode!r})")
    if config.moe_a2a_backend == "deepep":
        if config.deepep_mode == "normal":
            return SELECT_EXPERTS
        if config.deepep_mode == "low_latency":
            return DEEPEP_LOW_LATENCY
        raise NotImplementedError(
            f"deepep_mode {config.deepep_mode!r}: the recorder needs 'normal' or 'low_latency' "
            "to know which hook counts")
    return SELECT_EXPERTS


def tokens_are_replicated(source: str) -> bool:
    """Whether every rank of an attention tensor-parallel group counts the same tokens.

    The router runs on every rank of the group over the same tokens; DeepEP's counts are
    what each rank's experts received, which no other rank counts.
    """
    return source in (SELECT_EXPERTS, PER_TOKEN)
