"""Requests' routes laid out as a padded training batch: what a trainer's forward over the
batch replays (moestat.integrations.transformers_replay)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .._core import Error
from ._checks import check_output, common_layout, int_arg, per_request_offsets, routes_arg


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
    request does not fit, the routes have different layouts, or the batch would exceed
    ``moestat.routing.OUTPUT_BOUND`` (a first position or offset far past the rows);
    TypeError for arguments of the wrong type."""
    fn = "padded_batch"
    routes = routes_arg(routes, fn)
    layout = common_layout(routes, fn)
    offsets = per_request_offsets(offsets, len(routes), fn, minimum=None)
    ends = [offset + request.first_position + request.num_tokens
            for offset, request in zip(offsets, routes)]
    seq_len = max(ends) if seq_len is None else int_arg(seq_len, fn, "seq_len")
    for offset, request, end in zip(offsets, routes, ends):
        if offset < 0 or end > seq_len:
            raise Error(f"{fn}: request {request.request_id!r} (positions "
                        f"{request.first_position}..{request.first_position + request.num_tokens}"
                        f" from column {offset}) does not fit {seq_len} columns")
    shape = (len(routes), seq_len, layout.num_columns, layout.top_k)
    check_output(fn, shape, np.int64, routes)
    ids = np.zeros(shape, dtype=np.int64)
    valid = np.zeros(shape[:3], dtype=bool)
    for b, (offset, request, end) in enumerate(zip(offsets, routes, ends)):
        begin = offset + request.first_position
        ids[b, begin:end] = request.ids
        valid[b, begin:end] = request.valid
    return ids, valid
