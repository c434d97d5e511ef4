"""The cross-rank sum of an engine's counts, through the engine's own torch.distributed group,
every token counted once.

Every token once: where the ranks of a group route the same tokens (SGLang's attention
tensor-parallel group counting at select_experts; vLLM's tensor-parallel group outside
sequence-parallel MoE), only the group's first rank adds its counts; the others add zeros.
Ranks that see different tokens (data parallel, pipeline stages: each its own layers,
expert-parallel ranks counting their own experts) all add theirs.
"""

import torch
import torch.distributed as dist


def adds_its_counts(rank_in_group: int, tokens_replicated: bool) -> bool:
    """Whether this rank's counts go into the sum: rank_in_group is its rank in the group of
    ranks that may route the same tokens, tokens_replicated whether they do."""
    return rank_in_group == 0 or not tokens_replicated


def sum_over_ranks(counts: torch.Tensor, *, adds: bool, group=None,
                   align_passes: bool = False) -> torch.Tensor:
    """The sum over group's ranks (default: the default group) of the counts [passes, ...] of
    the ranks that add theirs (adds: adds_its_counts), the same on every rank; without an
    initialised torch.distributed, this rank's own (zeros if it does not add). counts must
    be on a device group's backend reduces (NCCL: the GPU; gloo: the CPU).

    align_passes: ranks may hold different numbers of passes (each counts the passes it ran):
    each pads its oldest end with empty passes to the most any rank holds, so the newest
    passes line up. Collective: every rank of group calls it, in the same order."""
    total = counts.clone() if adds else torch.zeros_like(counts)
    if not (dist.is_available() and dist.is_initialized()):
        return total
    if align_passes:
        passes = torch.tensor([total.shape[0]], dtype=torch.int64, device=total.device)
        dist.all_reduce(passes, op=dist.ReduceOp.MAX, group=group)
        missing = int(passes) - total.shape[0]
        if missing:
            total = torch.cat([total.new_zeros((missing, *total.shape[1:])), total])
    dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
    return total
