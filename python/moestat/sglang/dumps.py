"""The dumps SGLang's recorder returns and writes, from a moestat snapshot, laid out by
moestat's C++ writer (``sglang_stat_dump_bytes``, ``sglang_dump_bytes``).

- ``stat`` / ``stat_approx``: ``{"rank", "logical_count", "average_utilization_rate_over_window"}``,
  ``logical_count`` an int32 ``[buffer_size, L, E]`` tensor laid out as SGLang's circular
  buffer (pass ``i`` since the recorder was made, counting only recorded passes, in row
  ``i % buffer_size``; unused rows zero), summed over ranks; rank 0 alone writes the file.
- ``per_pass`` / ``per_token``: ``{"records": [...], "last_physical_to_logical_map"}``, every
  rank its own file.

Engine tensors keep the engine's device in the file, as torch.save records it ("cuda:0"): a
dump returned as an object is the file read back by torch.load, so it holds them there too.
Files are written to a temporary name and renamed, so a reader never sees half a dump.
"""

from __future__ import annotations

import io
import logging
import os
import time
from pathlib import Path

import numpy as np
import torch

from .._core import Placement, gpu_loads, sglang_dump_bytes, sglang_stat_dump_bytes
from ..engines.ranks import sum_over_ranks
from . import balancedness

logger = logging.getLogger(__name__)


def stat_dump(snapshot, *, config, rank, ring_start, num_passes, num_gpus, device, adds) -> bytes:
    """The stat dump of ``snapshot``: the last of the ``num_passes`` passes recorded since
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

    average, per_pass = None, None
    if config.reports_balancedness:
        loads = torch.from_numpy(gpu_loads(snapshot.physical_counts, num_gpus))
        loads = sum_over_ranks(loads.to(device), adds=adds)
        per_pass = [balancedness.pass_balancedness(loads[i]).item() for i in range(loads.shape[0])]
        if config.dump_has_utilization:
            average = balancedness.average_over_history(per_pass)
    # eplb_balancedness, not in SGLang's dump: the per-pass values SGLang only logs.
    return sglang_stat_dump_bytes(logical_count.cpu(), rank, average_utilization=average,
                                  device=str(logical_count.device), eplb_balancedness=per_pass)


def detail_dump(snapshot, *, passes, rank, physical_to_logical_map) -> bytes:
    """The per_pass / per_token dump: one record per recorded pass, in order.

    ``passes`` maps the recorder's pass ids to what the engine said about each pass:
    ``{"forward_pass_id": ..., "metadata": {...} or None, "misc_objects": [...]}``.
    """
    map_tensor = torch.as_tensor(physical_to_logical_map)
    placement = Placement(np.ascontiguousarray(map_tensor.cpu().numpy(), dtype=np.int64),
                          num_logical_experts=snapshot.num_logical_experts)
    return sglang_dump_bytes(snapshot, placement, rank, passes=passes,
                             map_device=str(map_tensor.device))


def load(data: bytes) -> dict:
    """A dump's bytes as torch.load reads its file (tensors on the devices it names)."""
    return torch.load(io.BytesIO(data), weights_only=True)


def stat_file_name() -> str:
    return f"expert_distribution_recorder_{time.time()}.pt"


def detail_file_name(rank) -> str:
    return f"expert_distribution_recorder_{time.time()}_{rank}.pt"


def save_atomically(data: bytes, directory, name) -> Path:
    """Writes ``data`` to ``directory/name`` through a temporary file and a rename."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    temporary = directory / f".{name}.{os.getpid()}.tmp"
    try:
        temporary.write_bytes(data)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    logger.info(f"Write expert distribution to {path}")
    return path
