"""moestat's planner as vLLM's EPLB policy (vLLM 0.33.0, ``vllm/distributed/eplb/policy``).

vLLM's ``EplbState`` calls ``policy.rebalance_experts(weight [L, E], num_replicas, num_groups,
num_nodes, num_ranks, old_global_expert_indices [L, P] | None)`` on every EP rank with the
same all-reduced load window and the map in force, and expects the new
``physical_to_logical_map`` [L, P] int64 (a CPU tensor). Physical slot ``p`` lives on rank
``p // (P / num_ranks)``; an expert's tokens are split evenly over its replicas.

``MoestatEplbPolicy.rebalance_experts`` plans every layer three ways and keeps, per layer, the
best for the load it was given (the heaviest rank's load: vLLM's balancedness is
``sum_l mean_r g / sum_l max_r g``, so a lighter heaviest rank in every layer is better in
total):

1. moestat's planner (``moestat.plan_moestat``, the same constraints as vLLM's default:
   hierarchical when ``num_groups % num_nodes == 0``, else global);
2. the policy it replaces (vLLM's ``DefaultEplbPolicy``), so the result is never worse in
   sample than what vLLM would have done;
3. the map in force, when it is valid: a layer whose current map balances at least as well as
   the best new one keeps it and moves nothing (this is also what all-zero load, vLLM's
   profile run, gets).

A new plan is then aligned with the map in force, which changes none of its loads: its nodes
and, within each node, its ranks are renumbered (greedy matching by the experts they share)
and each rank's slots reordered so that an expert already in a slot stays there. vLLM copies
an expert between ranks only when the receiving rank held no replica of it, so the alignment
cuts those copies. Among new plans that balance equally, the one needing fewer copies wins.

Deterministic: every rank computes the same map from the same inputs.

Offline (``offline.py``): with ``MOESTAT_VLLM_EPLB_LOAD_DIR`` set, every call first writes the
window it was handed as a moestat counts file (EP rank 0); with ``MOESTAT_VLLM_EPLB_PLACEMENT``
set to a placement that fits, the call returns that placement instead of planning. Without
``MOESTAT_VLLM_EPLB=1`` (``plan_with_moestat`` False) the plan is the reference policy's as it
returned it.
"""

import logging
import os

import numpy as np
import torch
from vllm.distributed.eplb.policy.abstract import AbstractEplbPolicy
from vllm.distributed.eplb.policy.default import DefaultEplbPolicy

from .._core import Error, Placement, balancedness_sum_ratio, placement_gpu_loads, plan_moestat
from . import offline

logger = logging.getLogger(__name__)


def rank_loads(weight, physical_to_logical, num_ranks):
    """[L, R] float64: each rank's load, an expert's load split evenly over its replicas
    (moestat.placement_gpu_loads). weight [L, E] (numpy or torch), physical_to_logical [L, P]
    holding every expert of [0, E) in each layer."""
    weight = _as_float64(weight)
    placement = Placement(np.ascontiguousarray(physical_to_logical, dtype=np.int64),
                          num_logical_experts=weight.shape[1])
    return placement_gpu_loads(weight, placement, num_ranks)


def balancedness(weight, physical_to_logical, num_ranks):
    """vLLM's balancedness of a placement under a load: sum over layers of the mean rank load
    over the sum over layers of the max rank load (0 without load, as vLLM logs it)."""
    return float(balancedness_sum_ratio(rank_loads(weight, physical_to_logical, num_ranks)))


def remote_copies(old_physical_to_logical, new_physical_to_logical, num_ranks):
    """[L] int64: per layer, the slots whose new expert the rank did not hold before (vLLM
    receives those from another rank; the rest it copies locally or leaves in place)."""
    old = np.asarray(old_physical_to_logical, dtype=np.int64)
    new = np.asarray(new_physical_to_logical, dtype=np.int64)
    num_layers, num_slots = new.shape
    slots_per_rank = num_slots // num_ranks
    copies = np.zeros(num_layers, dtype=np.int64)
    for rank in range(num_ranks):
        span = slice(rank * slots_per_rank, (rank + 1) * slots_per_rank)
        held = old[:, span]
        wanted = new[:, span]
        present = (wanted[:, :, None] == held[:, None, :]).any(axis=2)
        copies += (~present).sum(axis=1)
    return copies


def is_valid_map(physical_to_logical, num_layers, num_replicas, num_experts):
    """Whether a [L, P] integer map holds ids in [0, E) with every expert at least once per
    layer (moestat.Placement's check)."""
    phy2log = np.asarray(physical_to_logical)
    if phy2log.shape != (num_layers, num_replicas) or not np.issubdtype(phy2log.dtype, np.integer):
        return False
    try:
        Placement(np.ascontiguousarray(phy2log, dtype=np.int64), num_logical_experts=num_experts)
    except Error:
        return False
    return True


def _as_float64(weight):
    if isinstance(weight, torch.Tensor):
        return weight.detach().to("cpu", torch.float64).numpy()
    return np.asarray(weight, dtype=np.float64)


def _greedy_match(overlap):
    """match[i] = j pairing rows with columns, largest overlap first, lowest indices first among
    equal overlaps; rows that share nothing with a free column take the free columns in order
    (so equal overlaps keep the identity). Visits only the nonzero overlaps."""
    size = overlap.shape[0]
    rows, cols = np.nonzero(overlap)
    order = np.lexsort((cols, rows, -overlap[rows, cols]))
    match = np.full(size, -1, dtype=np.int64)
    used = np.zeros(size, dtype=bool)
    for i, j in zip(rows[order].tolist(), cols[order].tolist()):
        if match[i] < 0 and not used[j]:
            match[i] = j
            used[j] = True
    match[match < 0] = np.flatnonzero(~used)
    return match


def _holds(row, num_bins, num_experts):
    """[bins, E] bool: which experts each equal run of the row's slots holds (ids < 0 none)."""
    per_bin = row.reshape(num_bins, -1)
    held = np.zeros((num_bins, num_experts + 1), dtype=bool)
    held[np.arange(num_bins)[:, None], np.where(per_bin >= 0, per_bin, num_experts)] = True
    return held[:, :num_experts]


def _shared(new_holds, old_holds):
    """[new, old] int64: how many experts each pair of bins holds in common, from the few
    (bin, expert) pairs that hold something (no dense product)."""
    overlap = np.zeros((new_holds.shape[0], old_holds.shape[0]), dtype=np.int64)
    new_bins, new_experts = np.nonzero(new_holds)
    old_bins, old_experts = np.nonzero(old_holds)
    order = np.argsort(old_experts, kind="stable")
    old_bins, old_experts = old_bins[order], old_experts[order]
    first = np.searchsorted(old_experts, new_experts, side="left")
    count = np.searchsorted(old_experts, new_experts, side="right") - first
    total = int(count.sum())
    if total:
        offsets = np.arange(total) - np.repeat(np.cumsum(count) - count, count)
        np.add.at(overlap, (np.repeat(new_bins, count), old_bins[np.repeat(first, count) + offsets]), 1)
    return overlap


def align_to(new_physical_to_logical, old_physical_to_logical, num_ranks, num_nodes, num_experts):
    """The new map with its nodes, its ranks within nodes and each rank's slots renumbered to
    stay where the old map has them. Every rank keeps its multiset of experts, every node its
    ranks: the loads are the new map's, permuted."""
    new = np.asarray(new_physical_to_logical, dtype=np.int64)
    old = np.asarray(old_physical_to_logical, dtype=np.int64)
    num_layers, num_slots = new.shape
    slots_per_rank = num_slots // num_ranks
    ranks_per_node = num_ranks // num_nodes
    aligned = np.empty_like(new)
    for layer in range(num_layers):
        new_ranks = _holds(new[layer], num_ranks, num_experts)
        old_ranks = _holds(old[layer], num_ranks, num_experts)
        # new rank -> the old rank position it takes
        position = np.empty(num_ranks, dtype=np.int64)
        if num_nodes > 1:
            new_nodes = new_ranks.reshape(num_nodes, ranks_per_node, -1).any(axis=1)
            old_nodes = old_ranks.reshape(num_nodes, ranks_per_node, -1).any(axis=1)
            node_match = _greedy_match(_shared(new_nodes, old_nodes))
        else:
            node_match = np.zeros(1, dtype=np.int64)
        for node in range(num_nodes):
            new_span = slice(node * ranks_per_node, (node + 1) * ranks_per_node)
            old_node = int(node_match[node])
            old_span = slice(old_node * ranks_per_node, (old_node + 1) * ranks_per_node)
            overlap = _shared(new_ranks[new_span], old_ranks[old_span])
            position[new_span] = old_node * ranks_per_node + _greedy_match(overlap)
        for rank in range(num_ranks):
            target = int(position[rank])
            wanted = new[layer, rank * slots_per_rank:(rank + 1) * slots_per_rank].tolist()
            held = old[layer, target * slots_per_rank:(target + 1) * slots_per_rank].tolist()
            slots = [-1] * slots_per_rank
            taken = [False] * slots_per_rank
            for slot, expert in enumerate(held):
                for index, candidate in enumerate(wanted):
                    if not taken[index] and candidate == expert:
                        slots[slot] = candidate
                        taken[index] = True
                        break
            rest = iter(candidate for index, candidate in enumerate(wanted) if not taken[index])
            aligned[layer, target * slots_per_rank:(target + 1) * slots_per_rank] = [
                expert if expert >= 0 else next(rest) for expert in slots]
    return aligned


def plan(weight, num_replicas, num_groups, num_nodes, num_ranks,
         old_global_expert_indices=None, reference_policy=DefaultEplbPolicy, keep_current=True):
    """The policy's plan as a numpy [L, P] int64 map and a report (dict). keep_current: a layer
    whose map in force balances at least as well as the best new plan keeps it (False: it
    takes the new plan, as vLLM's default always does). The report: the balancedness of
    the reference policy's plan, moestat's, the map in force (None when not valid) and the
    result; per layer which candidate won ('moestat', 'reference', 'kept'); the remote copies
    of the reference plan (as the reference returned it, with the old map given to it) and of
    the result (None without an old map)."""
    loads = _as_float64(weight)
    if loads.ndim != 2:
        raise ValueError(f"weight: expected [layers, experts], got shape {tuple(loads.shape)}")
    num_layers, num_experts = loads.shape
    weight_tensor = torch.from_numpy(loads) if not isinstance(weight, torch.Tensor) else weight
    old = None
    if old_global_expert_indices is not None:
        candidate = np.asarray(old_global_expert_indices.cpu() if isinstance(
            old_global_expert_indices, torch.Tensor) else old_global_expert_indices)
        if is_valid_map(candidate, num_layers, num_replicas, num_experts):
            old = candidate.astype(np.int64)
    hierarchical = num_groups % num_nodes == 0
    align_nodes = num_nodes if hierarchical else 1

    reference_raw = reference_policy.rebalance_experts(
        weight_tensor, num_replicas, num_groups, num_nodes, num_ranks,
        torch.from_numpy(old) if old is not None else None)
    reference_raw = np.asarray(reference_raw.cpu() if isinstance(reference_raw, torch.Tensor)
                               else reference_raw, dtype=np.int64)
    candidates = {"reference": reference_raw}
    try:
        placement = plan_moestat(np.ascontiguousarray(loads), num_replicas, num_groups, num_nodes,
                                 num_ranks)
        mine = placement.physical_to_logical.astype(np.int64)
        if is_valid_map(mine, num_layers, num_replicas, num_experts):
            candidates["moestat"] = mine
        else:
            logger.warning("moestat: planner returned an invalid map; using the reference's")
    except Exception as error:  # noqa: BLE001 - vLLM must keep serving: use the reference
        logger.warning("moestat: planner refused (%s); using the reference policy's plan", error)
    if old is not None:
        candidates = {name: align_to(phy2log, old, num_ranks, align_nodes, num_experts)
                      for name, phy2log in candidates.items()}
        copies = {name: remote_copies(old, phy2log, num_ranks)
                  for name, phy2log in candidates.items()}
    else:
        copies = {name: np.zeros(num_layers, dtype=np.int64) for name in candidates}
    heaviest = {name: rank_loads(loads, phy2log, num_ranks).max(axis=1)
                for name, phy2log in candidates.items()}

    result = np.empty((num_layers, num_replicas), dtype=np.int64)
    chosen = []
    old_heaviest = rank_loads(loads, old, num_ranks).max(axis=1) if old is not None else None
    for layer in range(num_layers):
        # lightest heaviest rank, then fewest copies; moestat first on a full tie
        name = min(candidates, key=lambda n: (heaviest[n][layer], copies[n][layer],
                                              n != "moestat"))
        if keep_current and old is not None and old_heaviest[layer] <= heaviest[name][layer]:
            result[layer] = old[layer]
            chosen.append("kept")
        else:
            result[layer] = candidates[name][layer]
            chosen.append(name)
    if not is_valid_map(result, num_layers, num_replicas, num_experts):
        raise AssertionError("moestat: the chosen map leaves an expert without a replica")
    report = {
        "balancedness_reference": balancedness(loads, reference_raw, num_ranks),
        "balancedness_moestat": (balancedness(loads, candidates["moestat"], num_ranks)
                                 if "moestat" in candidates else None),
        "balancedness_kept": balancedness(loads, old, num_ranks) if old is not None else None,
        "balancedness": balancedness(loads, result, num_ranks),
        "chosen": chosen,
        "remote_copies_reference": (int(remote_copies(old, reference_raw, num_ranks).sum())
                                    if old is not None else None),
        "remote_copies": int(remote_copies(old, result, num_ranks).sum()) if old is not None else None,
    }
    return result, report


class MoestatEplbPolicy(AbstractEplbPolicy):
    """vLLM EPLB policy backed by moestat's planner; never worse in sample than
    ``reference_policy`` (vLLM's ``DefaultEplbPolicy``, or whatever ``register()`` replaced)."""

    reference_policy = DefaultEplbPolicy
    plan_with_moestat = True
    """False: plan as ``reference_policy`` does (``register()`` sets it from
    ``MOESTAT_VLLM_EPLB``; the offline variables alone keep vLLM's own plans)."""
    keep_current = True
    """A layer whose map in force balances at least as well as the best new plan keeps it."""
    last_report = None
    """The report of the latest call (see ``plan``); its "source" says whose map it returned:
    "moestat", "reference" or "placement file"."""

    @classmethod
    def rebalance_experts(
        cls,
        weight: torch.Tensor,
        num_replicas: int,
        num_groups: int,
        num_nodes: int,
        num_ranks: int,
        old_global_expert_indices: torch.Tensor | None = None,
    ) -> torch.Tensor:
        offline.record_window(weight, num_replicas, num_groups, num_nodes, num_ranks)
        num_layers, num_experts = weight.shape
        fixed = offline.static_placement(num_layers, num_replicas, num_experts)
        if fixed is not None:
            try:
                served = balancedness(weight, fixed, num_ranks)
            except ValueError:  # slots that do not divide over the ranks: vLLM's to judge
                served = float("nan")
            cls.last_report = {"source": "placement file", "balancedness": served,
                               "placement_file": os.environ.get(offline.ENV_PLACEMENT),
                               "chosen": ["placement file"] * num_layers}
            logger.info("moestat EPLB: the placement file %s, balancedness %.4f",
                        cls.last_report["placement_file"], served)
            return torch.from_numpy(fixed)
        if not cls.plan_with_moestat:
            result = cls.reference_policy.rebalance_experts(
                weight, num_replicas, num_groups, num_nodes, num_ranks, old_global_expert_indices)
            cls.last_report = {"source": "reference", "chosen": ["reference"] * num_layers}
            return result
        result, report = plan(weight, num_replicas, num_groups, num_nodes, num_ranks,
                              old_global_expert_indices, cls.reference_policy, cls.keep_current)
        report["source"] = "moestat"
        cls.last_report = report
        kept = report["chosen"].count("kept")
        logger.info(
            "moestat EPLB: balancedness %.4f (vLLM's default %.4f, moestat %s), %d of %d layers "
            "kept, %s remote copies (default: %s)", report["balancedness"],
            report["balancedness_reference"],
            "-" if report["balancedness_moestat"] is None else f"{report['balancedness_moestat']:.4f}",
            kept, len(report["chosen"]), report["remote_copies"], report["remote_copies_reference"])
        return torch.from_numpy(result)
