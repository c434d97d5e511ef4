"""The process's SGLang objects (the expert-distribution recorder, the routed-experts
capturer): where SGLang keeps them, its runtime resources, when SGLang runs in this process,
else here. Never imports SGLang."""

from __future__ import annotations

from typing import Callable, Optional

from .config import runtime_context
from .recorder import NoopExpertDistributionRecorder


class ProcessSlot:
    """One object of the process under ``attribute`` of SGLang's resources (here without
    SGLang). ``default``: makes the object read where none is set (None: none)."""

    def __init__(self, attribute: str, default: Optional[Callable] = None):
        self._attribute = attribute
        self._default = default
        self._value = None  # without SGLang

    def get(self):
        resources = _sglang_resources()
        value = getattr(resources, self._attribute, None) if resources is not None else self._value
        if value is None and self._default is not None:
            value = self._default()
            self.set(value)
        return value

    def set(self, value) -> None:
        resources = _sglang_resources()
        if resources is not None:
            setattr(resources, self._attribute, value)
        else:
            self._value = value


def _sglang_resources():
    """SGLang's resource bag when SGLang is running in this process."""
    context = runtime_context()
    return context.get_resources() if context is not None else None


recorder_slot = ProcessSlot("expert_distribution_recorder", NoopExpertDistributionRecorder)
capturer_slot = ProcessSlot("experts_capturer")


def get_global_expert_distribution_recorder():
    """The recorder every call site uses; the no-op recorder until one is set."""
    return recorder_slot.get()


def set_global_expert_distribution_recorder(value):
    recorder_slot.set(value)
