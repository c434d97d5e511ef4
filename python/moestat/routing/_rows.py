"""Routes to a format's rows and back, for every converter of moestat.routing: the ids of
valid rows written (not-valid rows refused or written as 0), and a format's rows read back
with every id checked against the layout (range, repeats, unrecorded rows, dense layers)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import _core
from .._core import Error
from ._checks import (UINT64_MAX, LayoutFields, check_options, check_output, int_arg,
                      str_arg)

# ---------------------------------------------------------------------------------------------
# Routes -> arrays
# ---------------------------------------------------------------------------------------------


def request_name(routes: Any) -> str:
    return f"request {routes.request_id!r}" if routes.request_id else "the request"


def refuse_invalid(routes: Any, layout: LayoutFields, fn: str, target: str) -> None:
    """Error naming the first (position, layer) of `routes` that is not valid."""
    valid = np.asarray(routes.valid, dtype=bool)
    if valid.all():
        return
    t, c = (int(x) for x in np.argwhere(~valid)[0])
    count = int((~valid).sum())
    raise Error(f"{fn}: {request_name(routes)} has {count} unrecorded (not valid) layer rows, "
                f"the first at position {routes.first_position + t} layer "
                f"{int(layout.layers[c])}; {target} cannot mark a row not recorded: pass "
                f"allow_invalid=True to write their ids as 0")


def ids_of(routes: Any, dtype: np.dtype) -> np.ndarray:
    """[T, C, K] ids of `routes` as `dtype`, 0 where not valid."""
    ids = np.asarray(routes.ids)
    valid = np.asarray(routes.valid, dtype=bool)
    out = ids.astype(dtype)
    if not valid.all():
        out[~valid] = 0
    return out


def check_holds(dtype: np.dtype, layout: LayoutFields, fn: str, context: str = "") -> None:
    """Error unless `dtype` holds every expert id of the layout."""
    if np.iinfo(dtype).max < layout.num_experts - 1:
        raise Error(f"{fn}: {dtype.name} holds expert ids up to {np.iinfo(dtype).max}, the "
                    f"layout has {layout.num_experts} experts{context}")


def all_layers(routes: Any, layout: LayoutFields, dtype: np.dtype, fn: str, *, target: str,
               allow_invalid: bool) -> np.ndarray:
    """[T, L, K] of `dtype` for one request: the MoE columns at their decoder layers, dense
    layers 0. Not-valid rows are an error naming the first (`target` cannot mark them), or
    written as 0 with `allow_invalid`."""
    check_holds(dtype, layout, fn)
    if not allow_invalid:
        refuse_invalid(routes, layout, fn, target)
    check_output(fn, (routes.num_tokens, layout.num_decoder_layers, layout.top_k), dtype,
                 [routes])
    full = np.zeros((routes.num_tokens, layout.num_decoder_layers, layout.top_k), dtype=dtype)
    full[:, layout.layers, :] = ids_of(routes, dtype)
    return full


# ---------------------------------------------------------------------------------------------
# Arrays -> routes
# ---------------------------------------------------------------------------------------------


def read_ids(array: np.ndarray, layout: LayoutFields, positions: np.ndarray, *,
             all_layers: bool, unrecorded: str, dense: str,
             fn: str) -> tuple[np.ndarray, np.ndarray]:
    """Checked (ids [T, C, K] int64, valid [T, C] bool) from `array` [T, L or C, K] (any integer
    dtype; its shape already checked). `positions[t]` names row t in messages."""
    if all_layers:
        if dense == "error" and layout.dense_layers.size:
            dense_part = array[:, layout.dense_layers, :]
            hit = np.argwhere(np.any(dense_part != 0, axis=2))
            if hit.size:
                t, j = (int(x) for x in hit[0])
                layer = int(layout.dense_layers[j])
                raise Error(f"{fn}: decoder layer {layer} is not a MoE layer of the layout but "
                            f"holds expert ids {dense_part[t, j].tolist()} at position "
                            f"{int(positions[t])}: the layout ({layout.describe()}) does not "
                            f"match the model (dense='ignore' drops such columns unread)")
        array = array[:, layout.layers, :]
    ids = array.astype(np.int64)
    K, E = layout.top_k, layout.num_experts
    valid = np.ones(ids.shape[:2], dtype=bool)
    if ids.size:
        missing = np.all(ids == -1, axis=2)
        if K > 1:
            missing |= np.all(ids == 0, axis=2)
        if missing.any():
            if unrecorded == "error":
                t, c = (int(x) for x in np.argwhere(missing)[0])
                raise Error(f"{fn}: position {int(positions[t])} layer "
                            f"{int(layout.layers[c])} has ids {ids[t, c].tolist()}: a row the "
                            f"engine did not record ({int(missing.sum())} such layer rows); "
                            f"pass unrecorded='invalid' to keep them as not valid")
            valid = ~missing
            ids[missing] = 0
        bad = valid[:, :, None] & ((ids < 0) | (ids >= E))
        if bad.any():
            t, c, k = (int(x) for x in np.argwhere(bad)[0])
            raise Error(f"{fn}: expert id {int(ids[t, c, k])} at position {int(positions[t])} "
                        f"layer {int(layout.layers[c])} is outside [0, {E})")
        if K > 1:
            ordered = np.sort(ids, axis=2)
            repeated = valid & np.any(ordered[:, :, 1:] == ordered[:, :, :-1], axis=2)
            if repeated.any():
                t, c = (int(x) for x in np.argwhere(repeated)[0])
                raise Error(f"{fn}: position {int(positions[t])} layer "
                            f"{int(layout.layers[c])} repeats an expert: ids "
                            f"{ids[t, c].tolist()}")
    return ids, valid


def make_routes(layout: LayoutFields, ids: np.ndarray, valid: np.ndarray, *, request_id: str,
                first_position: int, model: str, placement_version: int, fn: str) -> Any:
    str_arg(model, fn, "model")
    placement_version = int_arg(placement_version, fn, "placement_version", maximum=UINT64_MAX)
    return _core.RoutedExperts(layout.obj, ids.astype(layout.id_dtype), valid=valid,
                               request_id=request_id, first_position=first_position,
                               model=model, placement_version=placement_version)


def _check_all_layers_shape(array: np.ndarray, layout: LayoutFields, fn: str,
                            name: str) -> None:
    """Error unless `array` is [rows, L, K]."""
    expected = (layout.num_decoder_layers, layout.top_k)
    if tuple(array.shape[1:]) != expected:
        raise Error(f"{fn}: {name} has shape {tuple(array.shape)}, expected [rows, "
                    f"{expected[0]} decoder layers (all of them, dense ones included), "
                    f"{expected[1]} = top_k]")


def request_args(fn: str, layout: Any, first_position: Any, request_id: Any,
                 num_tokens: Any, unrecorded: Any,
                 dense: Any) -> tuple[LayoutFields, int, int | None]:
    """The arguments of a from_* function that reads one request, checked: (the layout's
    fields, first_position, num_tokens or None)."""
    info = LayoutFields(layout, fn)
    first_position = int_arg(first_position, fn, "first_position")
    str_arg(request_id, fn, "request_id")
    if num_tokens is not None:
        num_tokens = int_arg(num_tokens, fn, "num_tokens")
    check_options(fn, unrecorded, dense)
    return info, first_position, num_tokens


def _check_rows(rows: int, num_tokens: int | None, first_position: int, fn: str) -> None:
    if num_tokens is None:
        return
    expected = max(0, num_tokens - 1 - first_position)
    if rows != expected:
        raise Error(f"{fn}: {rows} rows, but a request of {num_tokens} tokens routed from "
                    f"position {first_position} has {expected} (positions [{first_position}, "
                    f"{num_tokens - 1}): the last token is never fed forward)")


def request_from_all_layers(array: np.ndarray, info: LayoutFields, *, first_position: int,
                            num_tokens: int | None, request_id: str, model: str,
                            placement_version: int, unrecorded: str, dense: str,
                            fn: str) -> Any:
    """One request's routes from `array` [rows, L, K] (all decoder layers), row p at position
    first_position + p; `num_tokens` (prompt + output), if known, must give that many rows."""
    _check_all_layers_shape(array, info, fn, "routed_experts")
    _check_rows(array.shape[0], num_tokens, first_position, fn)
    positions = first_position + np.arange(array.shape[0])
    ids, valid = read_ids(array, info, positions, all_layers=True, unrecorded=unrecorded,
                          dense=dense, fn=fn)
    return make_routes(info, ids, valid, request_id=request_id, first_position=first_position,
                       model=model, placement_version=placement_version, fn=fn)
