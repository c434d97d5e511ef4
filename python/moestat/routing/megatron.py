"""Routes as Megatron-Core's RouterReplay takes them (megatron-core 0.16.1,
``megatron/core/transformer/moe/router_replay.py``): one int64 ``[tokens, K]`` array per MoE
layer, the requests' tokens concatenated."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._core import Error
from ._checks import (LayoutFields, check_options, check_output, common_layout, int_arg,
                      int_array, list_arg, per_request, routes_arg, str_arg)
from ._rows import ids_of, make_routes, read_ids, refuse_invalid

__all__ = ["from_megatron", "to_megatron"]


def to_megatron(routes: Any, *, allow_invalid: bool = False) -> list[np.ndarray]:
    """The replay targets of Megatron-Core's ``RouterReplay.set_replay_data`` for `routes`
    (``megatron/core/transformer/moe/router_replay.py``, megatron-core 0.16.1).

    ``routes``: one RoutedExperts or a list of them, one layout. Returns one C-contiguous int64
    array ``[total_tokens, K]`` per MoE layer of the layout, in ascending decoder-layer order
    (the order Megatron constructs the routers, ``global_router_replay_instances``; with
    pipeline parallelism pass each stage the arrays of its own layers). Row order: the requests'
    tokens concatenated in list order; Megatron indexes ``[num_local_tokens, topk]`` in the
    rank's local token order, so pack, pad and split for SP/CP as the batch is.

    Megatron has no validity mask: not-valid rows are an error naming the first one;
    ``allow_invalid=True`` writes them as 0.
    """
    fn = "to_megatron"
    routes = routes_arg(routes, fn)
    layout = common_layout(routes, fn)
    if not allow_invalid:
        for r in routes:
            refuse_invalid(r, layout, fn, "Megatron's RouterReplay")
    check_output(fn, (sum(r.num_tokens for r in routes), layout.num_columns, layout.top_k),
                 np.int64, routes)
    ids = np.concatenate([ids_of(r, np.dtype(np.int64)) for r in routes], axis=0)
    return [np.ascontiguousarray(ids[:, c, :]) for c in range(layout.num_columns)]


def from_megatron(per_layer: Any, layout: Any, lengths: Sequence[int] | None = None, *,
                  request_ids: Sequence[str] | None = None,
                  first_positions: Sequence[int] | None = None, model: str = "",
                  placement_version: int = 0, unrecorded: str = "error") -> list:
    """Routes from Megatron-Core ``RouterReplay`` indices (the format of ``to_megatron``, e.g.
    what ``RouterReplay.get_recorded_data()`` returns, moved to the CPU).

    ``per_layer``: a list of one ``[total_tokens, K]`` integer array per MoE layer of the
    layout, in ascending decoder-layer order, or one array ``[num_moe_layers, total_tokens,
    K]``. ``lengths``: tokens of each request, in order (their sum is total_tokens); None: one
    request. ``request_ids`` and ``first_positions``: one per request (default "" and 0).

    Returns a list of RoutedExperts, one per request. Every row is valid except, with
    ``unrecorded="invalid"``, rows of all-0 (K > 1) or all -1 ids.
    """
    fn = "from_megatron"
    info = LayoutFields(layout, fn)
    check_options(fn, unrecorded)
    if isinstance(per_layer, (list, tuple)):
        arrays = [int_array(a, fn, f"per_layer[{i}]", 2) for i, a in enumerate(per_layer)]
        if len(arrays) != info.num_columns:
            raise Error(f"{fn}: {len(arrays)} layers of indices, the layout has "
                        f"{info.num_columns} MoE layers (one per RouterReplay instance)")
        for i, a in enumerate(arrays):
            if a.shape != arrays[0].shape:
                raise Error(f"{fn}: per_layer[{i}] has shape {tuple(a.shape)}, per_layer[0] "
                            f"has {tuple(arrays[0].shape)}")
        stacked = np.stack([a.astype(np.int64) for a in arrays], axis=1)
    else:
        array = int_array(per_layer, fn, "per_layer", 3)
        if array.shape[0] != info.num_columns:
            raise Error(f"{fn}: {array.shape[0]} layers of indices, the layout has "
                        f"{info.num_columns} MoE layers (one per RouterReplay instance)")
        stacked = np.swapaxes(array.astype(np.int64), 0, 1)
    if stacked.shape[2] != info.top_k:
        raise Error(f"{fn}: indices have {stacked.shape[2]} ids per token, the layout's top_k "
                    f"is {info.top_k}")
    total = stacked.shape[0]
    if lengths is None:
        lengths = [total]
    lengths = [int_arg(n, fn, f"lengths[{i}]")
               for i, n in enumerate(list_arg(lengths, fn, "lengths"))]
    if sum(lengths) != total:
        raise Error(f"{fn}: lengths add up to {sum(lengths)} tokens, the indices have {total}")
    request_ids = per_request(request_ids, len(lengths), "", fn, "request_ids")
    first_positions = per_request(first_positions, len(lengths), 0, fn, "first_positions")
    out, begin = [], 0
    for i, n in enumerate(lengths):
        rid = str_arg(request_ids[i], fn, f"request_ids[{i}]")
        first = int_arg(first_positions[i], fn, f"first_positions[{i}]")
        positions = first + np.arange(n)
        try:
            ids, valid = read_ids(stacked[begin:begin + n], info, positions, all_layers=False,
                                  unrecorded=unrecorded, dense="error", fn=fn)
        except Error as error:
            if len(lengths) == 1:
                raise
            raise Error(f"{error} (request {i}: rows [{begin}, {begin + n}) of the indices)"
                        ) from None
        out.append(make_routes(info, ids, valid, request_id=rid, first_position=first,
                               model=model, placement_version=placement_version, fn=fn))
        begin += n
    return out
