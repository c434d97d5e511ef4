"""What the recorder needs to know about the engine: the settings SGLang keys its recorder on.

Inside an SGLang process they come from SGLang's own runtime context (``get_exec()``,
``get_schedule()``, ``get_parallel()``, ``get_device()``), read at ``init_new`` exactly where
SGLang reads them, so a switched deployment records with the settings it was launched with.
Outside SGLang (tests, other engines) pass them as keyword arguments.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Optional

MODES = ("stat", "stat_approx", "per_pass", "per_token")
RUNTIME_CONTEXT = "sglang.srt.runtime_context"
BALANCEDNESS_REPORT_MODES = ("off", "server_log", "prometheus", "both")


@dataclasses.dataclass
class RecorderConfig:
    """SGLang's recorder settings (server arguments of the same names).

    Attributes:
        mode: ``expert_distribution_recorder_mode``: None (no recorder), ``"stat"``,
            ``"stat_approx"``, ``"per_pass"`` or ``"per_token"``.
        buffer_size: ``expert_distribution_recorder_buffer_size``: passes a ``stat`` dump
            holds; -1 keeps every pass since the last reset.
        moe_a2a_backend: ``"none"``, ``"deepep"``, ``"mori"``, ... (which hook counts).
        deepep_mode: ``"normal"``, ``"low_latency"`` or ``"auto"``.
        elastic_ep: whether an elastic-EP backend is set (low-latency counts may change length).
        balancedness_report_mode: ``expert_balancedness_report_mode``; anything but ``"off"``
            keeps the per-pass GPU balancedness history.
        min_rebalancing_utilization_threshold: ``eplb_min_rebalancing_utilization_threshold``;
            1.0 means no dump carries ``average_utilization_rate_over_window``.
        chunked_prefill_size: the most tokens of one pass (``per_token`` buffer).
        attn_tp_rank, attn_tp_size: this rank's place in its attention tensor-parallel
            group. Ranks of one group see the same tokens, so only the first contributes to
            the cross-rank sum of ``select_experts`` counts.
        device: where SGLang keeps its buffers (``"cuda"`` or ``"cpu"``).
        per_token_capacity: moestat's own setting: tokens a ``per_token`` recording keeps
            (allocated up front; later tokens are dropped and counted, where SGLang's host
            list grows without bound).
    """

    mode: Optional[str] = None
    buffer_size: int = 1000
    moe_a2a_backend: str = "none"
    deepep_mode: str = "auto"
    elastic_ep: bool = False
    balancedness_report_mode: str = "off"
    min_rebalancing_utilization_threshold: float = 1.0
    chunked_prefill_size: int = 8192
    attn_tp_rank: int = 0
    attn_tp_size: int = 1
    device: str = "cpu"
    per_token_capacity: int = 65536

    def __post_init__(self):
        if self.mode is not None and self.mode not in MODES:
            raise ValueError(f"mode: {self.mode!r} is none of {', '.join(MODES)} (or None)")
        if self.balancedness_report_mode not in BALANCEDNESS_REPORT_MODES:
            raise ValueError(
                f"balancedness_report_mode: {self.balancedness_report_mode!r} is none of "
                f"{', '.join(BALANCEDNESS_REPORT_MODES)}")
        if self.buffer_size == 0 or self.buffer_size < -1:
            raise ValueError(f"buffer_size: {self.buffer_size} (a positive count, or -1)")
        if not 0 <= self.attn_tp_rank < self.attn_tp_size:
            raise ValueError(
                f"attn_tp_rank {self.attn_tp_rank} is not in [0, attn_tp_size "
                f"{self.attn_tp_size})")

    @property
    def reports_balancedness(self) -> bool:
        return self.balancedness_report_mode != "off"

    @property
    def dump_has_utilization(self) -> bool:
        """Whether stat dumps carry the mean utilisation (SGLang's rule)."""
        return self.reports_balancedness and self.min_rebalancing_utilization_threshold != 1.0

    @staticmethod
    def dump_dir() -> str:
        """SGLang's ``SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR``, read at each dump as SGLang does."""
        return os.environ.get("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR", "/tmp")

    @classmethod
    def from_sglang(cls, **overrides) -> "RecorderConfig":
        """The settings of the running SGLang process, with ``overrides`` replacing fields.

        Without SGLang running in this process, the defaults with ``overrides`` (SGLang is
        never imported here: that would start its whole server stack).
        """
        unknown = set(overrides) - {field.name for field in dataclasses.fields(cls)}
        if unknown:
            raise TypeError(f"unknown recorder settings: {', '.join(sorted(unknown))}")
        context = runtime_context()
        if context is None:
            return cls(**overrides)

        moe = context.get_exec().moe
        parallel = context.get_parallel()
        values = dict(
            mode=moe.expert_distribution_recorder_mode,
            buffer_size=moe.expert_distribution_recorder_buffer_size,
            moe_a2a_backend=_name(moe.moe_a2a_backend),
            deepep_mode=_name(moe.deepep_mode),
            elastic_ep=getattr(moe, "elastic_ep_backend", None) is not None,
            balancedness_report_mode=_name(moe.expert_balancedness_report_mode),
            min_rebalancing_utilization_threshold=moe.eplb_min_rebalancing_utilization_threshold,
            chunked_prefill_size=context.get_schedule().chunked_prefill_size,
            attn_tp_rank=int(getattr(parallel, "attn_tp_rank", 0) or 0),
            attn_tp_size=int(getattr(parallel, "attn_tp_size", 1) or 1),
            device=str(context.get_device().device),
        )
        values.update(overrides)
        return cls(**values)


def _name(setting) -> str:
    """An SGLang setting as its plain string (some are enums whose value is the string)."""
    return str(getattr(setting, "value", setting))


def runtime_context():
    """SGLang's runtime context (its settings and resources) when SGLang runs in this process,
    else None. Never imports SGLang: that would start its whole server stack."""
    return sys.modules.get(RUNTIME_CONTEXT)


def sglang_setting(read, default):
    """``read(runtime context)`` where SGLang runs in this process, else ``default`` (also
    where this SGLang has no such setting)."""
    context = runtime_context()
    if context is None:
        return default
    try:
        return read(context)
    except AttributeError:
        return default
