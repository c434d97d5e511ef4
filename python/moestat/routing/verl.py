"""Routes as a verl 0.9.1 batch holds them: int16 ``[bs, seq, L or MoE layers, K]`` (R3 or
R2) beside a per-token mask, samples left-padded."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._core import Error
from ._checks import (LayoutFields, as_array, check_options, check_output, choice_arg,
                      common_layout, int_arg, int_array, per_request, per_request_offsets,
                      routes_arg, str_arg)
from ._rows import ids_of, make_routes, read_ids, request_name

__all__ = ["from_verl", "to_verl"]


def _verl_check_experts(layout: LayoutFields, fn: str) -> None:
    if layout.num_experts > 32768:
        raise Error(f"{fn}: verl's routed_experts are int16, which hold expert ids up to "
                    f"32767; the layout has {layout.num_experts} experts")


def to_verl(routes: Any, seq_len: int | None = None, layers: str = "moe", *,
            offsets: Sequence[int] | None = None,
            allow_invalid: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """A verl batch's ``routed_experts`` tensor for `routes` and the mask of its rows (verl
    0.9.1, ``experimental/agent_loop/agent_loop.py`` and ``utils/megatron/
    router_replay_utils.py``).

    ``routes``: one RoutedExperts or a list of them (the batch's samples, one layout).
    Returns ``(ids, mask)``: ids int16 ``[bs, seq_len, X, K]`` where X is the layout's MoE
    layers (``layers="moe"``: verl's R2 layout, a MoE ordinal per column) or all
    ``num_decoder_layers`` with dense layers 0 (``layers="all"``: R3, what verl builds from
    the engines' all-layer arrays); mask bool ``[bs, seq_len]``, True where a row holds a
    recorded route. Everything else is 0 (verl's zero padding).

    Row t of sample b sits at index ``offsets[b] + first_position + t``: ``offsets[b]`` is where
    the sample's position 0 sits (verl left-pads prompts: ``padded_prompt_len -
    len(prompt_ids)``; default 0). ``seq_len``: the batch's length (default: the last row + 1;
    verl's R3 aligns routes to input_len, one row more than the routes of a finished request).

    A token valid in every MoE layer gets mask True; one valid in none, mask False. A token
    valid in some layers only cannot be said with a per-token mask: an error naming it, unless
    ``allow_invalid=True``, which writes it as 0 with mask False. E > 32768 experts (int16
    overflow): error.
    """
    fn = "to_verl"
    routes = routes_arg(routes, fn)
    choice_arg(layers, fn, "layers", ("moe", "all"))
    layout = common_layout(routes, fn)
    _verl_check_experts(layout, fn)
    offsets = per_request_offsets(offsets, len(routes), fn)
    ends = [o + r.first_position + r.num_tokens for o, r in zip(offsets, routes)]
    needed = max(ends)
    if seq_len is None:
        seq_len = needed
    seq_len = int_arg(seq_len, fn, "seq_len")
    if seq_len < needed:
        b = ends.index(needed)
        raise Error(f"{fn}: seq_len {seq_len} is too short: sample {b} has rows up to index "
                    f"{needed - 1}")
    width = layout.num_columns if layers == "moe" else layout.num_decoder_layers
    check_output(fn, (len(routes), seq_len, width, layout.top_k), np.int16, routes)
    ids = np.zeros((len(routes), seq_len, width, layout.top_k), dtype=np.int16)
    mask = np.zeros((len(routes), seq_len), dtype=bool)
    for b, (r, offset) in enumerate(zip(routes, offsets)):
        valid = np.asarray(r.valid, dtype=bool)
        full = valid.all(axis=1)
        partial = ~full & valid.any(axis=1)
        if partial.any() and not allow_invalid:
            t = int(np.flatnonzero(partial)[0])
            c = int(np.flatnonzero(~valid[t])[0])
            raise Error(f"{fn}: sample {b} ({request_name(r)}) position "
                        f"{r.first_position + t} is recorded in some MoE layers but not in "
                        f"layer {int(layout.layers[c])}; verl's mask is per token: pass "
                        f"allow_invalid=True to write such tokens as 0 with mask False")
        rows = ids_of(r, np.dtype(np.int16))
        rows[~full] = 0
        start = offset + r.first_position
        stop = start + r.num_tokens
        if layers == "moe":
            ids[b, start:stop] = rows
        else:
            ids[b, start:stop][:, layout.layers, :] = rows
        mask[b, start:stop] = full
    return ids, mask


def from_verl(routed_experts: Any, mask: Any, layout: Any, *, layers: str | None = None,
              offsets: Sequence[int] | None = None, request_ids: Sequence[str] | None = None,
              model: str = "", placement_version: int = 0, unrecorded: str = "error",
              dense: str = "error") -> list:
    """Routes of a verl batch (the format of ``to_verl``), one RoutedExperts per sample.

    ``routed_experts``: integer ``[bs, seq, X, K]`` (verl's int16; any integer dtype is read),
    X = the layout's MoE layers or all its decoder layers (``layers``: "moe" or "all"; None
    tells them apart by X). ``mask``: bool (or 0/1 integer) ``[bs, seq]``, True where a row
    holds a route. ``offsets[b]``: index of sample b's position 0 (default 0).

    Sample b's routes run from its first masked row to its last; masked-out rows between are
    returned not valid. A masked-out row must hold only zeros (else ids and mask are
    misaligned: error). A sample with no masked row gives 0 tokens at position 0. Masked rows
    are checked as in ``from_sglang`` (range, repeats, all-0 rows with ``unrecorded``, dense
    layers with ``dense``).
    """
    fn = "from_verl"
    info = LayoutFields(layout, fn)
    check_options(fn, unrecorded, dense)
    array = int_array(routed_experts, fn, "routed_experts", 4)
    if layers is not None:
        choice_arg(layers, fn, "layers", ("moe", "all"))
    widths = {"moe": info.num_columns, "all": info.num_decoder_layers}
    if layers is None:
        layers = "moe" if array.shape[2] == info.num_columns else "all"
        expected = (f"{info.num_columns} MoE layers or {info.num_decoder_layers} decoder layers"
                    if info.num_columns != info.num_decoder_layers
                    else f"{info.num_columns} layers")
    else:
        expected = (f"{widths[layers]} "
                    f"{'MoE layers' if layers == 'moe' else 'decoder layers (all of them)'}")
    if array.shape[2] != widths[layers] or array.shape[3] != info.top_k:
        raise Error(f"{fn}: routed_experts has shape {tuple(array.shape)}, expected [bs, seq, "
                    f"{expected}, {info.top_k} = top_k]")
    mask_array = as_array(mask, fn, "mask")
    if mask_array.dtype != np.bool_:
        if mask_array.dtype.kind not in "iu" or np.any((mask_array != 0) & (mask_array != 1)):
            raise Error(f"{fn}: mask has dtype {mask_array.dtype}, expected bool (or 0/1 "
                        f"integers)")
        mask_array = mask_array != 0
    if mask_array.shape != array.shape[:2]:
        raise Error(f"{fn}: mask has shape {tuple(mask_array.shape)}, routed_experts "
                    f"{tuple(array.shape[:2])} rows")
    bs = array.shape[0]
    offsets = per_request_offsets(offsets, bs, fn)
    request_ids = per_request(request_ids, bs, "", fn, "request_ids")
    out = []
    for b in range(bs):
        rid = str_arg(request_ids[b], fn, f"request_ids[{b}]")
        sample, m = array[b], mask_array[b]
        stray = ~m & np.any(sample != 0, axis=(1, 2))
        if stray.any():
            i = int(np.flatnonzero(stray)[0])
            raise Error(f"{fn}: sample {b} index {i} holds expert ids but its mask is False: "
                        f"ids and mask are misaligned")
        rows = np.flatnonzero(m)
        # A sample with no masked row: 0 tokens at position 0.
        lo, hi = (int(rows[0]), int(rows[-1]) + 1) if rows.size else (offsets[b], offsets[b])
        first = lo - offsets[b]
        if first < 0:
            raise Error(f"{fn}: sample {b} has a route at index {lo}, before its position 0 at "
                        f"offset {offsets[b]}")
        try:
            got, got_valid = read_ids(sample[rows], info, rows - offsets[b],
                                      all_layers=layers == "all", unrecorded=unrecorded,
                                      dense=dense, fn=fn)
        except Error as error:
            raise Error(f"{error} (sample {b})") from None
        ids = np.zeros((hi - lo, info.num_columns, info.top_k), np.int64)
        valid = np.zeros((hi - lo, info.num_columns), bool)
        ids[rows - lo] = got
        valid[rows - lo] = got_valid
        out.append(make_routes(info, ids, valid, request_id=rid, first_position=first,
                               model=model, placement_version=placement_version, fn=fn))
    return out

