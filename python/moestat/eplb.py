"""``rebalance_experts`` with the signature and results of DeepSeek's ``eplb.py``.

Engines that call ``eplb.rebalance_experts(weight, num_replicas, num_groups, num_nodes,
num_gpus)`` can call this one instead: the same placement (moestat reproduces eplb.py
exactly), computed in C++ in about a millisecond for DeepSeek-V3 on 72 GPUs, or moestat's
planner with ``planner="moestat"``.
"""

import numpy as np

from ._core import plan_deepseek, plan_moestat


def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus, planner="deepseek"):
    """Places ``num_replicas`` expert replicas per layer on ``num_gpus`` GPUs.

    Args:
        weight: [layers, experts] loads (numpy array, torch tensor, or nested lists).
        num_replicas: physical expert slots per layer, a multiple of ``num_gpus``.
        num_groups: expert groups (DeepSeek's group-limited routing); divides the experts.
        num_nodes: server nodes; divides ``num_gpus``.
        num_gpus: GPUs (expert-parallel ranks).
        planner: ``"deepseek"`` (eplb.py's algorithm, exactly) or ``"moestat"`` (never worse
            on ``weight``; see docs/placement.md).

    Returns:
        ``(phy2log, log2phy, logcnt)`` as eplb.py returns them: [layers, num_replicas] the
        expert of each slot, [layers, experts, max replicas] each expert's slots (-1 padded),
        [layers, experts] replica counts; int64, as torch tensors when ``weight`` is one,
        else numpy arrays. eplb.py lists an expert's slots in the order it made the replicas;
        here they are in ascending slot order (the same set).
    """
    is_torch = type(weight).__module__.startswith("torch")
    loads = np.ascontiguousarray(weight.detach().cpu().double().numpy() if is_torch else
                                 np.asarray(weight, dtype=np.float64))
    if planner == "deepseek":
        placement = plan_deepseek(loads, num_replicas, num_groups, num_nodes, num_gpus)
    elif planner == "moestat":
        placement = plan_moestat(loads, num_replicas, num_groups, num_nodes, num_gpus)
    else:
        raise ValueError(f"planner: {planner!r} is neither 'deepseek' nor 'moestat'")
    phy2log = placement.physical_to_logical.astype(np.int64)
    log2phy = placement.logical_to_physical.astype(np.int64)
    logcnt = placement.replica_counts.astype(np.int64)
    if is_torch:
        import torch

        return torch.from_numpy(phy2log), torch.from_numpy(log2phy), torch.from_numpy(logcnt)
    return phy2log, log2phy, logcnt
