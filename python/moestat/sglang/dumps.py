"""The dumps SGLang's recorder returns and writes, built from a moestat snapshot.

- ``stat`` / ``stat_approx``: ``{"rank", "logical_count", "average_utilization_rate_over_window"}``,
  ``logical_count`` an int32 ``[buffer_size, L, E]`` tensor laid out as SGLang's circular
  buffer (pass ``i`` since the recorder was made, counting only recorded passes, in row
  ``i % buffer_size``; unused rows zero), summed over ranks; rank 0 alone writes the file.
- ``per_pass`` / ``per_token``: ``{"records": [...], "last_physical_to_logical_map"}``, every
  rank its own file.

Files are written to a temporary name and renamed, so a reader never sees half a dump.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np
import torch

from .._core import gpu_loads
from ..engines.ranks import sum_over_ranks
from . import balancedness

logger = logging.getLogger(__name__)

GATHERER_KEY = "primary"  # SGLang's only single-pass gatherer key


def stat_dump(snapshot, *, config, rank, ring_start, num_passes, num_gpus, device, adds):
    """The stat dump dict of ``snapshot``: the last of the ``num_passes`` passes recorded since
    the last reset, oldest first; the first of them goes to ring row ``ring_start``. Summed
    over the default group's ranks, as SGLang (``adds``: whether this rank's counts join the
    sum, moestat.engines.ranks)."""
    logical = torch.from_numpy(snapshot.logical_counts)
    kept = logical if config.buffer_size < 0 else logical[-config.buffer_size:]
    if config.buffer_size < 0:
        logical_count = kept.to(torch.int32)
    else:
        logical_count = torch.zeros((config.buffer_size, *logical.shape[1:]), dtype=torch.int32)
        first = num_passes - kept.shape[0]
        rows = (ring_start + first + torch.arange(kept.shape[0])) % config.buffer_size
        logical_count[rows] = kept.to(torch.int32)
    logical_count = sum_over_ranks(logical_count.to(device), adds=adds)

    output = dict(rank=rank, logical_count=logical_count,
                  average_utilization_rate_over_window=None)
    if config.reports_balancedness:
        loads = torch.from_numpy(gpu_loads(snapshot.physical_counts, num_gpus))
        loads = sum_over_ranks(loads.to(device), adds=adds)
        per_pass = [balancedness.pass_balancedness(loads[i]).item() for i in range(loads.shape[0])]
        if config.dump_has_utilization:
            output["average_utilization_rate_over_window"] = (
                balancedness.average_over_history(per_pass))
        # Not in SGLang's dump: the per-pass values SGLang only logs, oldest first.
        output["eplb_balancedness"] = torch.tensor(per_pass, dtype=torch.float32)
    return output


def detail_dump(snapshot, *, passes, rank, physical_to_logical_map):
    """The per_pass / per_token dump: one record per recorded pass, in order.

    ``passes`` maps the recorder's pass ids to what the engine said about each pass:
    ``{"forward_pass_id": ..., "metadata": {...} or None, "misc_objects": [...]}``.
    """
    if snapshot.mode == "per_token":
        records = _per_token_records(snapshot, passes, rank)
    else:
        counts = torch.from_numpy(snapshot.physical_counts).to(torch.int32)
        records = [
            dict(forward_pass_id=passes[int(pass_id)]["forward_pass_id"], rank=rank,
                 gatherer_key=GATHERER_KEY, global_physical_count=counts[i].clone())
            for i, pass_id in enumerate(snapshot.pass_ids)
        ]
    return dict(records=records, last_physical_to_logical_map=physical_to_logical_map)


def _per_token_records(snapshot, passes, rank, columns=8):
    """``columns``: SGLang's per-token buffer width, whatever the model's top-k."""
    token_pass_ids = snapshot.token_pass_ids  # ascending: passes keep their tokens in order
    token_ids = snapshot.token_physical_ids  # [N, L, top_k], -1 where nothing counts
    num_physical = snapshot.num_physical_experts
    records = []
    for pass_id in sorted(passes):
        info = passes[pass_id]
        metadata = info["metadata"]
        num_tokens = len(metadata["input_ids"])
        ids = np.full((snapshot.num_layers, num_tokens, columns), -1, dtype=np.int32)
        first, end = np.searchsorted(token_pass_ids, [pass_id, pass_id + 1])
        mine = token_ids[first:end][:num_tokens]
        ids[:, : mine.shape[0], : snapshot.top_k] = mine.transpose(1, 0, 2)
        counts = np.zeros((snapshot.num_layers, num_physical), dtype=np.int32)
        for layer in range(snapshot.num_layers):
            routed = ids[layer][ids[layer] >= 0]
            counts[layer] = np.bincount(routed, minlength=num_physical)
        records.append(dict(forward_pass_id=info["forward_pass_id"], rank=rank,
                            gatherer_key=GATHERER_KEY, **metadata,
                            topk_ids_of_layer=torch.from_numpy(ids),
                            misc_objects=info["misc_objects"],
                            global_physical_count=torch.from_numpy(counts)))
    return records


def stat_file_name() -> str:
    return f"expert_distribution_recorder_{time.time()}.pt"


def detail_file_name(rank) -> str:
    return f"expert_distribution_recorder_{time.time()}_{rank}.pt"


def save_atomically(data, directory, name) -> Path:
    """torch.save to ``directory/name`` through a temporary file and a rename."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    temporary = directory / f".{name}.{os.getpid()}.tmp"
    try:
        torch.save(data, str(temporary))
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    logger.info(f"Write expert distribution to {path}")
    return path
