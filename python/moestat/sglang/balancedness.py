"""GPU balancedness as SGLang defines it, so its EPLB thresholds keep their meaning.

Per pass and layer, each GPU's load is the sum of its physical slots' counts
(moestat.gpu_loads);
``utilisation = (mean load + 1e-5) / (max load + 1e-5)``; a pass's balancedness is the mean
over ALL layers (dense layers, with no load, score 1.0: SGLang counts them, so this does
too). The dump's ``average_utilization_rate_over_window`` is the mean over the last 1000
passes. Computed once per dump from the recorded window, not once per pass, so recording
adds no cross-rank collective and no host sync to a forward pass.
"""

from __future__ import annotations

import torch

HISTORY_LENGTH = 1000  # SGLang's longest balancedness window (EPLB_BALANCEDNESS_WINDOW_SIZES)


def pass_balancedness(loads_of_pass: torch.Tensor) -> torch.Tensor:
    """[L, G] loads of one pass -> its balancedness, a float32 scalar (SGLang's arithmetic)."""
    loads = loads_of_pass.float()
    return torch.mean((loads.mean(-1) + 1e-5) / (loads.amax(-1) + 1e-5))


def average_over_history(balancedness: list) -> float:
    """SGLang's value: the mean of the last HISTORY_LENGTH passes (0 without any), as the
    float32 it broadcasts."""
    history = balancedness[-HISTORY_LENGTH:]
    mean = sum(history) / len(history) if history else 0
    return torch.tensor([mean], dtype=torch.float32).item()
