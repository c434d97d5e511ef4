"""Requests' routes laid out as a padded training batch: what a trainer's forward over the
batch replays (moestat.integrations.transformers_replay)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .._core import Error


def padded_batch(routes: Sequence, seq_len: int | None = None,
                 offsets: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(ids, valid) for a batch whose row b holds request routes[b]'s tokens from position 0,
    starting at column offsets[b] (its left padding; 0 without).

    ids: int64 [batch, seq_len, num_moe_layers, top_k], 0 where nothing was recorded.
    valid: bool [batch, seq_len, num_moe_layers], True where routes[b] recorded position
      column - offsets[b] in that layer: padding, positions the routes do not hold (the last
      token of a finished sequence, never fed forward) and rows not recorded are False, and
      a replay leaves them to the router.
    seq_len: None for the narrowest that holds every request. Raises moestat.Error when a
    request does not fit, or the routes have different layouts."""
    routes = list(routes)
    if not routes:
        raise Error("padded_batch: no routes")
    layout = routes[0].layout
    if any(request.layout != layout for request in routes):
        raise Error("padded_batch: the routes have different layouts")
    offsets = [0] * len(routes) if offsets is None else [int(offset) for offset in offsets]
    if len(offsets) != len(routes):
        raise Error(f"padded_batch: {len(offsets)} offsets for {len(routes)} requests")
    ends = [offset + request.first_position + request.num_tokens
            for offset, request in zip(offsets, routes)]
    seq_len = max(ends) if seq_len is None else int(seq_len)
    ids = np.zeros((len(routes), seq_len, layout.num_columns, layout.top_k), dtype=np.int64)
    valid = np.zeros((len(routes), seq_len, layout.num_columns), dtype=bool)
    for b, (offset, request, end) in enumerate(zip(offsets, routes, ends)):
        if offset < 0 or end > seq_len:
            raise Error(f"padded_batch: request {request.request_id!r} (positions "
                        f"{request.first_position}..{request.first_position + request.num_tokens}"
                        f" from column {offset}) does not fit {seq_len} columns")
        begin = offset + request.first_position
        ids[b, begin:end] = request.ids
        valid[b, begin:end] = request.valid
    return ids, valid
