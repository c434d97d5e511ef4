"""The process's recorder, where SGLang keeps it when SGLang is loaded, else here."""

from __future__ import annotations

import sys

from .recorder import NoopExpertDistributionRecorder

_recorder = None


def _sglang_resources():
    """SGLang's resource bag when SGLang is running in this process (never imports SGLang)."""
    context = sys.modules.get("sglang.srt.runtime_context")
    return context.get_resources() if context is not None else None


def get_global_expert_distribution_recorder():
    """The recorder every call site uses; the no-op recorder until one is set."""
    global _recorder
    resources = _sglang_resources()
    if resources is not None:
        if resources.expert_distribution_recorder is None:
            resources.expert_distribution_recorder = NoopExpertDistributionRecorder()
        return resources.expert_distribution_recorder
    if _recorder is None:
        _recorder = NoopExpertDistributionRecorder()
    return _recorder


def set_global_expert_distribution_recorder(value):
    global _recorder
    resources = _sglang_resources()
    if resources is not None:
        resources.expert_distribution_recorder = value
    else:
        _recorder = value
