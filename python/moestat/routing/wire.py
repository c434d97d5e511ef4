"""Routed experts in the formats of inference engines and RL trainers, both ways.

A ``moestat.RoutedExperts`` holds, for tokens [first_position, first_position + num_tokens) of
one request, the top-k LOGICAL expert ids each MoE layer chose, with a validity mask: row t is
the routing computed when token first_position + t was fed forward. A finished request of
seqlen tokens (prompt + output) has seqlen - 1 routed tokens: the last sampled token is never
fed. Every upstream format below uses that same row convention; what differs is the layer
axis, the dtype, the transport, and that none but verl's can say "this row was not recorded".

=============  =========================================  ==============  =====================
format         array                                      dtype           layer axis
=============  =========================================  ==============  =====================
SGLang 0.5.23  base64 of raw little-endian [rows, L, K]   int32 (main:    all L decoder layers,
               in ``meta_info["routed_experts"]``         +uint16/uint8)  dense ones 0
vLLM 0.33.0    ``CompletionOutput.routed_experts``        uint8 (E<=256)  all L, dense ones 0
               [rows, L, K]; HTTP: base64 of a ``.npy``   else uint16
Megatron-Core  ``RouterReplay.set_replay_data``: one      int64           one array per MoE
               [tokens, K] per MoE layer                                  layer
verl 0.9.1     [bs, seq, L or MoE layers, K] + mask       int16           all L (R3) / MoE (R2)
slime          [len(tokens) - 1, L, K]                    int32           all L, dense ones 0
=============  =========================================  ==============  =====================

(L = the model's ``num_hidden_layers``, dense layers included; K = top_k; E = experts.)

Every ``to_*`` function takes routes and writes the format; every ``from_*`` function takes the
format and a ``moestat.RouteLayout`` (which decoder layers are MoE, E, K) and returns routes.
Both raise ``moestat.Error`` (one line, naming the position and decoder layer where one is at
fault) for a wrong shape or dtype, an id outside [0, E), a repeated id in a row, an id that a
narrow dtype cannot hold, and a row that the format cannot carry; ``TypeError`` for an argument
of the wrong type. What round-trips exactly: ``from_x(to_x(r), r.layout, ...)`` equals ``r``
(ids, validity, first position, request id) whenever ``to_x`` accepts ``r`` without
``allow_invalid``; verl keeps validity per token only.

Rows an engine did not record. SGLang, vLLM, slime and Megatron have no validity mask: an
unrecorded row is whatever the engine's zero-initialised buffer held (all ids 0) or a -1
sentinel. ``from_*`` finds such rows only where they cannot be a real routing: a MoE layer's
row whose K > 1 ids are all 0 (a repeated id) or all -1. By default (``unrecorded="error"``)
that is an error naming the position and layer; ``unrecorded="invalid"`` returns those rows
as not valid instead. With top_k == 1 an unrecorded row reads as expert 0 and cannot be told
apart. ``to_*`` refuses routes with not-valid rows for those formats unless
``allow_invalid=True``, which writes their ids as 0 (a trainer replays such a row as expert 0,
repeated K times: mask the tokens yourself).

Dense layers. In the all-layers formats (SGLang, vLLM, slime, verl with ``layers="all"``) the
columns of layers that are not MoE in the layout must be 0, as the engines leave them. A
non-zero id there means the layout does not match the model (a wrong MoE layer list or offset,
or a draft/MTP router that wrote into a target layer): ``from_*`` raises unless
``dense="ignore"``, which drops the dense columns unread.

Bounds. No converter builds an array of more than 16 times the bytes of the routes it is
given plus 1 GiB (``OUTPUT_BOUND``): a first position, offset or ``seq_len`` far past the
routes' rows, or a layout of far more decoder layers than MoE ones, is a ``moestat.Error``
naming the size before anything is allocated. A ``.npy`` payload must hold exactly the bytes
its header declares.

Only numpy is imported; torch tensors on the CPU are taken wherever an array is (through
``numpy.asarray``).
"""
from __future__ import annotations

import base64
import binascii
import io
import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import _core
from .._core import Error

__all__ = [
    "OUTPUT_BOUND",
    "SGLANG_WIRE_DTYPES",
    "from_megatron",
    "from_sglang",
    "from_slime",
    "from_verl",
    "from_vllm",
    "to_megatron",
    "to_sglang",
    "to_slime",
    "to_verl",
    "to_vllm",
]

#: The dtype names SGLang's ``meta_info["routed_experts_dtype"]`` may carry (upstream main after
#: 0.5.23, ``routed_experts_wire._WIRE_DTYPES``); 0.5.23 sends int32 and no dtype field.
SGLANG_WIRE_DTYPES = ("int32", "uint16", "uint8")
# vLLM 0.33.0's RoutedExpertsCapturer emits uint8/uint16; its HTTP protocol comment also lists
# int32.
_VLLM_DTYPES = ("uint8", "uint16", "int32")
#: What a converter's output may take: (expansion, allowance) = 16 times the bytes of the
#: routes given (ids and validity) plus 1 GiB. Padded layouts and all-layer formats are a few
#: times their routes; the allowance holds ordinary batches whatever their padding.
OUTPUT_BOUND = (16, 1 << 30)
# The widest integers the C++ side takes: positions and counts are int64, versions uint64.
_INT64_MAX = (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1


# ---------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------


class _Layout:
    """The fields of a RouteLayout the converters use, read once. A RouteLayout has been
    validated (at most 2^16 decoder layers), so its arrays are small."""

    def __init__(self, layout: Any, fn: str) -> None:
        if not isinstance(layout, _core.RouteLayout):
            raise TypeError(f"{fn}: layout must be a moestat.RouteLayout, "
                            f"got {type(layout).__name__}")
        self.num_decoder_layers = int(layout.num_decoder_layers)
        self.layers = np.asarray(list(layout.layers), dtype=np.int64)
        self.num_experts = int(layout.num_experts)
        self.top_k = int(layout.top_k)
        self.id_dtype = np.dtype(layout.id_dtype)
        self.obj = layout
        self.num_columns = len(self.layers)
        dense = np.ones(self.num_decoder_layers, dtype=bool)
        dense[self.layers] = False
        self.dense_layers = np.flatnonzero(dense)

    def key(self) -> tuple:
        return (self.num_decoder_layers, tuple(self.layers.tolist()), self.num_experts,
                self.top_k)

    def describe(self) -> str:
        return (f"{self.num_decoder_layers} decoder layers, MoE layers "
                f"{_short_list(self.layers.tolist())}, {self.num_experts} experts, "
                f"top_k {self.top_k}")


def _short_list(values: list) -> str:
    if len(values) <= 8:
        return "[" + ", ".join(map(str, values)) + "]"
    return "[" + ", ".join(map(str, values[:6])) + f", ... ({len(values)} in all)]"


def _index(value: Any, fn: str, name: str, minimum: int | None = 0,
           maximum: int = _INT64_MAX) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{fn}: {name} must be an int, got bool")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__}") from None
    if minimum is not None and number < minimum:
        raise Error(f"{fn}: {name} must be >= {minimum}, got {number}")
    if number > maximum:
        raise Error(f"{fn}: {name} must be <= {maximum}, got {number}")
    return number


def _routes_bytes(routes: Sequence) -> int:
    """The bytes `routes` hold: their ids and validity bytes."""
    return sum(r.num_tokens * r.layout.bytes_per_token for r in routes)


def _check_output(fn: str, shape: Sequence[int], dtype: Any, routes: Sequence) -> None:
    """Error unless an array of `shape` and `dtype` fits OUTPUT_BOUND for `routes`: checked
    before it is allocated (numpy would take the memory, or raise MemoryError)."""
    size = math.prod(int(n) for n in shape) * np.dtype(dtype).itemsize
    given = _routes_bytes(routes)
    expansion, allowance = OUTPUT_BOUND
    if size > expansion * given + allowance:
        raise Error(f"{fn}: the output would be {size:,} bytes ({np.dtype(dtype).name} "
                    f"{list(shape)}), more than {expansion} times the {given:,} bytes of the "
                    f"routes plus {allowance >> 30} GiB: positions, offsets or seq_len far past "
                    f"the routes' rows, or a layout of far more decoder layers than MoE ones")


def _string(value: Any, fn: str, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{fn}: {name} must be a str, got {type(value).__name__}")
    return value


def _choice(value: Any, fn: str, name: str, choices: Sequence[str]) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{fn}: {name} must be one of {', '.join(map(repr, choices))}, got "
                        f"{type(value).__name__}")
    if value not in choices:
        raise Error(f"{fn}: {name} must be one of {', '.join(map(repr, choices))}, got "
                    f"{value!r}")
    return value


def _array(value: Any, fn: str, name: str) -> np.ndarray:
    """A numpy view of an array-like (numpy, a CPU torch tensor, anything with __array__)."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__array__"):
        raise TypeError(f"{fn}: {name} must be an array (numpy or a CPU torch tensor), "
                        f"got {type(value).__name__}")
    try:
        return np.asarray(value)
    except (TypeError, RuntimeError) as error:  # a CUDA tensor: "can't convert cuda:0 ..."
        raise TypeError(f"{fn}: {name} cannot be read as a numpy array ({error}); move it to "
                        f"the CPU first") from None


def _integer_array(value: Any, fn: str, name: str, ndim: int | tuple[int, ...],
                   dtypes: Sequence[str] | None = None) -> np.ndarray:
    array = _array(value, fn, name)
    if dtypes is not None:
        if array.dtype.name not in dtypes:
            raise Error(f"{fn}: {name} has dtype {array.dtype}, expected {' or '.join(dtypes)}")
    elif array.dtype.kind not in "iu":
        raise Error(f"{fn}: {name} has dtype {array.dtype}, expected an integer dtype")
    ndims = (ndim,) if isinstance(ndim, int) else ndim
    if array.ndim not in ndims:
        raise Error(f"{fn}: {name} has {array.ndim} dimensions {tuple(array.shape)}, expected "
                    f"{' or '.join(map(str, ndims))}")
    return array


def _routes_list(routes: Any, fn: str) -> list:
    if isinstance(routes, _core.RoutedExperts):
        routes = [routes]
    elif isinstance(routes, (list, tuple)):
        routes = list(routes)
        for i, r in enumerate(routes):
            if not isinstance(r, _core.RoutedExperts):
                raise TypeError(f"{fn}: routes[{i}] must be a moestat.RoutedExperts, "
                                f"got {type(r).__name__}")
    else:
        raise TypeError(f"{fn}: routes must be a moestat.RoutedExperts or a list of them, "
                        f"got {type(routes).__name__}")
    if not routes:
        raise Error(f"{fn}: no routes given")
    return routes


def _one_routes(routes: Any, fn: str) -> Any:
    if not isinstance(routes, _core.RoutedExperts):
        raise TypeError(f"{fn}: routes must be a moestat.RoutedExperts (one request), "
                        f"got {type(routes).__name__}")
    return routes


def _common_layout(routes: list, fn: str) -> _Layout:
    layout = _Layout(routes[0].layout, fn)
    for i, r in enumerate(routes[1:], 1):
        other = _Layout(r.layout, fn)
        if other.key() != layout.key():
            raise Error(f"{fn}: routes[{i}] has layout ({other.describe()}), routes[0] has "
                        f"({layout.describe()}): one batch holds one model")
    return layout


# ---------------------------------------------------------------------------------------------
# Routes -> arrays
# ---------------------------------------------------------------------------------------------


def _request_name(routes: Any) -> str:
    return f"request {routes.request_id!r}" if routes.request_id else "the request"


def _refuse_invalid(routes: Any, layout: _Layout, fn: str, target: str) -> None:
    """Error naming the first (position, layer) of `routes` that is not valid."""
    valid = np.asarray(routes.valid, dtype=bool)
    if valid.all():
        return
    t, c = (int(x) for x in np.argwhere(~valid)[0])
    count = int((~valid).sum())
    raise Error(f"{fn}: {_request_name(routes)} has {count} unrecorded (not valid) layer rows, "
                f"the first at position {routes.first_position + t} layer "
                f"{int(layout.layers[c])}; {target} cannot mark a row not recorded: pass "
                f"allow_invalid=True to write their ids as 0")


def _ids_of(routes: Any, layout: _Layout, dtype: np.dtype) -> np.ndarray:
    """[T, C, K] ids of `routes` as `dtype`, 0 where not valid."""
    ids = np.asarray(routes.ids)
    valid = np.asarray(routes.valid, dtype=bool)
    out = ids.astype(dtype)
    if not valid.all():
        out[~valid] = 0
    return out


def _all_layers(routes: Any, layout: _Layout, dtype: np.dtype, fn: str) -> np.ndarray:
    """[T, L, K] of `dtype`: the MoE columns at their decoder layers, dense layers 0."""
    _check_output(fn, (routes.num_tokens, layout.num_decoder_layers, layout.top_k), dtype,
                  [routes])
    full = np.zeros((routes.num_tokens, layout.num_decoder_layers, layout.top_k), dtype=dtype)
    full[:, layout.layers, :] = _ids_of(routes, layout, dtype)
    return full


def _check_holds(dtype: np.dtype, layout: _Layout, fn: str, context: str = "") -> None:
    if np.iinfo(dtype).max < layout.num_experts - 1:
        raise Error(f"{fn}: {dtype.name} holds expert ids up to {np.iinfo(dtype).max}, the "
                    f"layout has {layout.num_experts} experts{context}")


# ---------------------------------------------------------------------------------------------
# Arrays -> routes
# ---------------------------------------------------------------------------------------------


def _ids_from_array(array: np.ndarray, layout: _Layout, positions: np.ndarray, *,
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


def _make_routes(layout: _Layout, ids: np.ndarray, valid: np.ndarray, *, request_id: str,
                 first_position: int, model: str, placement_version: int, fn: str) -> Any:
    _string(model, fn, "model")
    placement_version = _index(placement_version, fn, "placement_version", maximum=_UINT64_MAX)
    return _core.RoutedExperts(layout.obj, ids.astype(layout.id_dtype), valid=valid,
                               request_id=request_id, first_position=first_position,
                               model=model, placement_version=placement_version)


def _check_rows(rows: int, num_tokens: int | None, first_position: int, fn: str) -> None:
    if num_tokens is None:
        return
    expected = max(0, num_tokens - 1 - first_position)
    if rows != expected:
        raise Error(f"{fn}: {rows} rows, but a request of {num_tokens} tokens routed from "
                    f"position {first_position} has {expected} (positions [{first_position}, "
                    f"{num_tokens - 1}): the last token is never fed forward)")


def _options(fn: str, unrecorded: str, dense: str | None = None) -> None:
    _choice(unrecorded, fn, "unrecorded", ("error", "invalid"))
    if dense is not None:
        _choice(dense, fn, "dense", ("error", "ignore"))


def _full_from_array(array: np.ndarray, layout: _Layout, fn: str, name: str) -> np.ndarray:
    """`array` checked to be [rows, L, K]."""
    expected = (layout.num_decoder_layers, layout.top_k)
    if tuple(array.shape[1:]) != expected:
        raise Error(f"{fn}: {name} has shape {tuple(array.shape)}, expected [rows, "
                    f"{expected[0]} decoder layers (all of them, dense ones included), "
                    f"{expected[1]} = top_k]")
    return array


def _b64decode(text: str, fn: str, name: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as error:
        raise Error(f"{fn}: {name} is not valid base64 ({error})") from None


# ---------------------------------------------------------------------------------------------
# SGLang
# ---------------------------------------------------------------------------------------------


def _sglang_dtype(value: Any, fn: str, name: str) -> np.dtype:
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        value = np.dtype(value).name
    if not isinstance(value, str):
        raise TypeError(f"{fn}: {name} must be a dtype name ({', '.join(SGLANG_WIRE_DTYPES)}) "
                        f"or a numpy dtype, got {type(value).__name__}")
    if value not in SGLANG_WIRE_DTYPES:
        raise Error(f"{fn}: {name} {value!r} is not one of {', '.join(SGLANG_WIRE_DTYPES)}")
    return np.dtype(value).newbyteorder("<")


def to_sglang(routes: Any, dtype: Any = "int32", *, allow_invalid: bool = False) -> dict:
    """The ``meta_info`` fields SGLang's ``/generate`` returns for `routes` (one request).

    Format of SGLang 0.5.23 (``detokenizer_manager._b64_encode_per_request``):
    ``meta_info["routed_experts"]`` is the base64 (standard alphabet, padded) of the raw bytes
    of a C-order little-endian int32 array ``[rows, L, K]``, no header and no shape: L is the
    model's ``num_hidden_layers``, ALL decoder layers, the dense ones' entries 0; K = top_k.
    Row p is position ``routed_experts_start_len + p``; a finished request of seqlen tokens
    carries rows for positions ``[routed_experts_start_len, seqlen - 1)``, so ``routes``
    should start at the request's ``routed_experts_start_len`` (its ``first_position``).

    ``dtype``: "int32" (0.5.23 and the default of later versions), or "uint16"/"uint8" (SGLang
    main after 0.5.23, ``SGLANG_ROUTED_EXPERTS_DTYPE``): then ``"routed_experts_dtype"`` names
    it, which 0.5.23's decoder does not read (it decodes int32 only). A dtype that cannot hold
    every id of the layout's E experts is an error (uint8 holds 256 experts, uint16 65536).

    Not-valid rows are an error naming the first one (SGLang's format has no validity mask);
    ``allow_invalid=True`` writes their ids as 0, which is what SGLang itself returns for a row
    it never wrote.

    Returns ``{"routed_experts": str}`` plus ``{"routed_experts_dtype": name}`` when dtype is
    not int32.
    """
    fn = "to_sglang"
    routes = _one_routes(routes, fn)
    wire = _sglang_dtype(dtype, fn, "dtype")
    layout = _Layout(routes.layout, fn)
    _check_holds(wire, layout, fn)
    if not allow_invalid:
        _refuse_invalid(routes, layout, fn, "SGLang's format")
    full = _all_layers(routes, layout, wire, fn)
    out = {"routed_experts": base64.b64encode(full.tobytes(order="C")).decode("ascii")}
    if wire.name != "int32":
        out["routed_experts_dtype"] = wire.name
    return out


def from_sglang(meta_info: Any, layout: Any, first_position: int = 0, request_id: str = "",
                dtype: Any = None, *, num_tokens: int | None = None, model: str = "",
                placement_version: int = 0, unrecorded: str = "error",
                dense: str = "error") -> Any:
    """Routes of one request from SGLang's ``routed_experts`` (the format of ``to_sglang``).

    ``meta_info``: the response's ``meta_info`` dict (``"routed_experts"`` and, from SGLang
    main after 0.5.23, ``"routed_experts_dtype"``), the whole ``/generate`` response (a dict
    with ``"meta_info"``), the OpenAI endpoints' ``sglext`` dict, the base64 string itself, or
    an array: ``[rows, L, K]``, or the flat array SGLang's own
    ``extract_routed_experts_from_meta_info`` returns.

    ``first_position``: the request's ``routed_experts_start_len`` (0.5.23 does not echo it;
    SGLang clamps it to seqlen - 1). ``dtype``: the wire dtype when the payload does not name
    it ("int32" when neither does); a payload that names another is an error.
    ``num_tokens``: the request's tokens (prompt + output), if known: the row count must then be
    ``num_tokens - 1 - first_position`` (SGLang only logs a warning when it is not).

    Every row is valid except, with ``unrecorded="invalid"``, rows of all-0 (K > 1) or all -1
    ids (see the module's docstring); ids of the layout's dense layers must be 0 unless
    ``dense="ignore"``. Errors: base64 that does not decode, a byte length that is not a whole
    number of ``[L, K]`` rows of the dtype, ids outside [0, E), a repeated id in a row.
    """
    fn = "from_sglang"
    info = _Layout(layout, fn)
    first_position = _index(first_position, fn, "first_position")
    _string(request_id, fn, "request_id")
    if num_tokens is not None:
        num_tokens = _index(num_tokens, fn, "num_tokens")
    _options(fn, unrecorded, dense)

    payload, declared = meta_info, None
    if isinstance(payload, Mapping):
        if "routed_experts" not in payload and isinstance(payload.get("meta_info"), Mapping):
            payload = payload["meta_info"]
        declared = payload.get("routed_experts_dtype")
        payload = payload.get("routed_experts")
        if payload is None:
            raise Error(f"{fn}: the response has no routed_experts: ask with "
                        f"return_routed_experts=True, on a server started with "
                        f"--enable-return-routed-experts")
    wire = None
    if declared is not None:
        wire = _sglang_dtype(declared, fn, "routed_experts_dtype")
    if dtype is not None:
        asked = _sglang_dtype(dtype, fn, "dtype")
        if wire is not None and asked != wire:
            raise Error(f"{fn}: dtype {asked.name} given, but the response says "
                        f"routed_experts_dtype {wire.name}")
        wire = asked
    wire = wire if wire is not None else np.dtype("<i4")

    L, K = info.num_decoder_layers, info.top_k
    if isinstance(payload, str):
        raw = _b64decode(payload, fn, "routed_experts")
        row_bytes = L * K * wire.itemsize
        if len(raw) % row_bytes:
            raise Error(f"{fn}: routed_experts holds {len(raw)} bytes, not a whole number of "
                        f"rows of {L} layers x {K} ids x {wire.itemsize} bytes ({wire.name}): "
                        f"a wrong layout or dtype, or a truncated payload")
        array = np.frombuffer(raw, dtype=wire).reshape(-1, L, K)
    else:
        array = _integer_array(payload, fn, "routed_experts", (1, 3))
        if array.ndim == 1:
            if array.size % (L * K):
                raise Error(f"{fn}: routed_experts holds {array.size} ids, not a whole number "
                            f"of rows of {L} layers x {K} ids")
            array = array.reshape(-1, L, K)
        _full_from_array(array, info, fn, "routed_experts")
    _check_rows(array.shape[0], num_tokens, first_position, fn)
    positions = first_position + np.arange(array.shape[0])
    ids, valid = _ids_from_array(array, info, positions, all_layers=True,
                                 unrecorded=unrecorded, dense=dense, fn=fn)
    return _make_routes(info, ids, valid, request_id=request_id, first_position=first_position,
                        model=model, placement_version=placement_version, fn=fn)


# ---------------------------------------------------------------------------------------------
# vLLM
# ---------------------------------------------------------------------------------------------


def _vllm_dtype(layout: _Layout, fn: str) -> np.dtype:
    # vLLM 0.33.0 RoutedExpertsCapturer: "uint8" if num_experts <= 256 else "uint16".
    if layout.num_experts > 65536:
        raise Error(f"{fn}: vLLM sends uint8 or uint16 ids, which hold 65536 experts; the "
                    f"layout has {layout.num_experts}")
    return np.dtype(np.uint8 if layout.num_experts <= 256 else np.uint16)


def to_vllm(routes: Any, encoding: str = "array", *, allow_invalid: bool = False) -> Any:
    """`routes` (one request) as vLLM 0.33.0 returns them.

    ``encoding="array"``: ``CompletionOutput.routed_experts``, a numpy array
    ``[rows, L, K]`` (L = ``num_hidden_layers``, ALL decoder layers, dense ones 0) of uint8
    when the layout has E <= 256 experts, else uint16 (E > 65536: error). vLLM's rows are
    positions ``[routed_experts_prompt_start, num_tokens - 1)``: ``routes`` should start at
    the request's ``routed_experts_prompt_start`` (its ``first_position``).
    ``encoding="base64"``: the HTTP choice field ``routed_experts``, vLLM's
    ``vllm.utils.serial_utils.numpy2base64`` of that array: base64 of the ``.npy`` file
    ``np.save(..., allow_pickle=False)`` writes (header with shape and dtype).

    Not-valid rows are an error naming the first one; ``allow_invalid=True`` writes them as 0.
    """
    fn = "to_vllm"
    routes = _one_routes(routes, fn)
    _choice(encoding, fn, "encoding", ("array", "base64"))
    layout = _Layout(routes.layout, fn)
    dtype = _vllm_dtype(layout, fn)
    if not allow_invalid:
        _refuse_invalid(routes, layout, fn, "vLLM's format")
    full = _all_layers(routes, layout, dtype, fn)
    if encoding == "array":
        return full
    with io.BytesIO() as buffer:  # vllm.utils.serial_utils.numpy2base64
        np.save(buffer, full, allow_pickle=False)
        return base64.b64encode(buffer.getbuffer()).decode("ascii")


_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0,
                (2, 0): np.lib.format.read_array_header_2_0}


def _load_npy(text: str, fn: str) -> np.ndarray:
    """The array of a base64 ``.npy``, its header read first: an array is made only of bytes
    that hold exactly what the header declares (np.load allocates the declared size first),
    and never by unpickling."""
    raw = _b64decode(text, fn, "routed_experts")
    if not raw.startswith(b"\x93NUMPY"):
        kind = ("a pickle" if raw[:1] == b"\x80" else
                "an .npz archive" if raw.startswith(b"PK") else "no .npy header")
        raise Error(f"{fn}: routed_experts is not a .npy array ({kind}; vLLM sends "
                    f"numpy2base64's .npy)")
    stream = io.BytesIO(raw)
    try:
        version = np.lib.format.read_magic(stream)
        if version not in _NPY_HEADERS:
            raise Error(f"{fn}: routed_experts is a .npy of version {version[0]}.{version[1]}; "
                        f"np.save writes 1.0 (2.0 for headers over 64 KiB)")
        shape, fortran_order, dtype = _NPY_HEADERS[version](stream)
    except ValueError as error:
        if str(error).startswith("Header info length"):
            raise Error(f"{fn}: routed_experts' .npy header is longer than numpy reads (10000 "
                        f"characters; a [rows, L, K] array's takes about 128)") from None
        raise Error(f"{fn}: routed_experts is not a readable .npy array "
                    f"({str(error).splitlines()[0]})") from None
    except (EOFError, OSError, UnicodeDecodeError) as error:
        raise Error(f"{fn}: routed_experts is not a readable .npy array "
                    f"({str(error).splitlines()[0]})") from None
    if dtype.hasobject:
        raise Error(f"{fn}: routed_experts is a .npy of Python objects, which would need "
                    f"unpickling: refused")
    count = math.prod(shape)
    held = len(raw) - stream.tell()
    if count * dtype.itemsize != held:
        raise Error(f"{fn}: routed_experts' .npy header declares {dtype} {list(shape)} "
                    f"({count * dtype.itemsize:,} bytes), but {held:,} bytes follow it")
    array = np.frombuffer(raw, dtype=dtype, count=count, offset=stream.tell())
    return array.reshape(shape, order="F" if fortran_order else "C")


def from_vllm(routed_experts: Any, layout: Any, first_position: int = 0, request_id: str = "",
              *, num_tokens: int | None = None, model: str = "", placement_version: int = 0,
              unrecorded: str = "error", dense: str = "error") -> Any:
    """Routes of one request from vLLM 0.33.0's ``routed_experts`` (the format of ``to_vllm``).

    ``routed_experts``: ``CompletionOutput.routed_experts`` (numpy ``[rows, L, K]`` uint8,
    uint16, or int32 — the dtypes vLLM's protocol lists; L = all decoder layers) or the HTTP
    choice's base64 ``.npy`` string, read with ``np.load(..., allow_pickle=False)``: a pickled
    or object payload is refused.

    ``first_position``: the request's ``routed_experts_prompt_start``. ``num_tokens``: the
    request's tokens (prompt + output), if known: the row count must then be
    ``num_tokens - 1 - first_position``. A dtype too narrow for the layout's E experts (uint8
    with E > 256) is an error, as are ids outside [0, E) and repeated ids; rows of all-0
    (K > 1) or all -1 ids, and dense layers' ids, as in ``from_sglang``.
    """
    fn = "from_vllm"
    info = _Layout(layout, fn)
    first_position = _index(first_position, fn, "first_position")
    _string(request_id, fn, "request_id")
    if num_tokens is not None:
        num_tokens = _index(num_tokens, fn, "num_tokens")
    _options(fn, unrecorded, dense)
    if isinstance(routed_experts, str):
        routed_experts = _load_npy(routed_experts, fn)
    array = _integer_array(routed_experts, fn, "routed_experts", 3, _VLLM_DTYPES)
    _check_holds(array.dtype, info, fn, ": the engine's ids were truncated, or the layout is "
                 "not the engine's")
    _full_from_array(array, info, fn, "routed_experts")
    _check_rows(array.shape[0], num_tokens, first_position, fn)
    positions = first_position + np.arange(array.shape[0])
    ids, valid = _ids_from_array(array, info, positions, all_layers=True,
                                 unrecorded=unrecorded, dense=dense, fn=fn)
    return _make_routes(info, ids, valid, request_id=request_id, first_position=first_position,
                        model=model, placement_version=placement_version, fn=fn)


# ---------------------------------------------------------------------------------------------
# Megatron-Core
# ---------------------------------------------------------------------------------------------


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
    routes = _routes_list(routes, fn)
    layout = _common_layout(routes, fn)
    if not allow_invalid:
        for r in routes:
            _refuse_invalid(r, layout, fn, "Megatron's RouterReplay")
    _check_output(fn, (sum(r.num_tokens for r in routes), layout.num_columns, layout.top_k),
                  np.int64, routes)
    ids = np.concatenate([_ids_of(r, layout, np.dtype(np.int64)) for r in routes], axis=0)
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
    info = _Layout(layout, fn)
    _options(fn, unrecorded)
    if isinstance(per_layer, (list, tuple)):
        arrays = [_integer_array(a, fn, f"per_layer[{i}]", 2) for i, a in enumerate(per_layer)]
        if len(arrays) != info.num_columns:
            raise Error(f"{fn}: {len(arrays)} layers of indices, the layout has "
                        f"{info.num_columns} MoE layers (one per RouterReplay instance)")
        for i, a in enumerate(arrays):
            if a.shape != arrays[0].shape:
                raise Error(f"{fn}: per_layer[{i}] has shape {tuple(a.shape)}, per_layer[0] "
                            f"has {tuple(arrays[0].shape)}")
        stacked = np.stack([a.astype(np.int64) for a in arrays], axis=1)
    else:
        array = _integer_array(per_layer, fn, "per_layer", 3)
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
    lengths = [_index(n, fn, f"lengths[{i}]")
               for i, n in enumerate(_sequence(lengths, fn, "lengths"))]
    if sum(lengths) != total:
        raise Error(f"{fn}: lengths add up to {sum(lengths)} tokens, the indices have {total}")
    request_ids = _per_request(request_ids, len(lengths), "", fn, "request_ids")
    first_positions = _per_request(first_positions, len(lengths), 0, fn, "first_positions")
    out, begin = [], 0
    for i, n in enumerate(lengths):
        rid = _string(request_ids[i], fn, f"request_ids[{i}]")
        first = _index(first_positions[i], fn, f"first_positions[{i}]")
        positions = first + np.arange(n)
        try:
            ids, valid = _ids_from_array(stacked[begin:begin + n], info, positions,
                                         all_layers=False, unrecorded=unrecorded, dense="error",
                                         fn=fn)
        except Error as error:
            if len(lengths) == 1:
                raise
            raise Error(f"{error} (request {i}: rows [{begin}, {begin + n}) of the indices)"
                        ) from None
        out.append(_make_routes(info, ids, valid, request_id=rid, first_position=first,
                                model=model, placement_version=placement_version, fn=fn))
        begin += n
    return out


def _sequence(values: Any, fn: str, name: str) -> list:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) and not (
            isinstance(values, np.ndarray) and values.ndim == 1):
        raise TypeError(f"{fn}: {name} must be a list, got {type(values).__name__}")
    return list(values)


def _per_request(values: Any, count: int, default: Any, fn: str, name: str) -> list:
    if values is None:
        return [default] * count
    values = _sequence(values, fn, name)
    if len(values) != count:
        raise Error(f"{fn}: {len(values)} {name} for {count} requests")
    return values


# ---------------------------------------------------------------------------------------------
# verl
# ---------------------------------------------------------------------------------------------


def _verl_check_experts(layout: _Layout, fn: str) -> None:
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
    routes = _routes_list(routes, fn)
    _choice(layers, fn, "layers", ("moe", "all"))
    layout = _common_layout(routes, fn)
    _verl_check_experts(layout, fn)
    offsets = [_index(o, fn, f"offsets[{i}]")
               for i, o in enumerate(_per_request(offsets, len(routes), 0, fn, "offsets"))]
    ends = [o + r.first_position + r.num_tokens for o, r in zip(offsets, routes)]
    needed = max(ends)
    if seq_len is None:
        seq_len = needed
    seq_len = _index(seq_len, fn, "seq_len")
    if seq_len < needed:
        b = ends.index(needed)
        raise Error(f"{fn}: seq_len {seq_len} is too short: sample {b} has rows up to index "
                    f"{needed - 1}")
    width = layout.num_columns if layers == "moe" else layout.num_decoder_layers
    _check_output(fn, (len(routes), seq_len, width, layout.top_k), np.int16, routes)
    ids = np.zeros((len(routes), seq_len, width, layout.top_k), dtype=np.int16)
    mask = np.zeros((len(routes), seq_len), dtype=bool)
    for b, (r, offset) in enumerate(zip(routes, offsets)):
        valid = np.asarray(r.valid, dtype=bool)
        full = valid.all(axis=1)
        partial = ~full & valid.any(axis=1)
        if partial.any() and not allow_invalid:
            t = int(np.flatnonzero(partial)[0])
            c = int(np.flatnonzero(~valid[t])[0])
            raise Error(f"{fn}: sample {b} ({_request_name(r)}) position "
                        f"{r.first_position + t} is recorded in some MoE layers but not in "
                        f"layer {int(layout.layers[c])}; verl's mask is per token: pass "
                        f"allow_invalid=True to write such tokens as 0 with mask False")
        rows = _ids_of(r, layout, np.dtype(np.int16))
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
    info = _Layout(layout, fn)
    _options(fn, unrecorded, dense)
    array = _integer_array(routed_experts, fn, "routed_experts", 4)
    if layers is not None:
        _choice(layers, fn, "layers", ("moe", "all"))
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
    mask_array = _array(mask, fn, "mask")
    if mask_array.dtype != np.bool_:
        if mask_array.dtype.kind not in "iu" or np.any((mask_array != 0) & (mask_array != 1)):
            raise Error(f"{fn}: mask has dtype {mask_array.dtype}, expected bool (or 0/1 "
                        f"integers)")
        mask_array = mask_array != 0
    if mask_array.shape != array.shape[:2]:
        raise Error(f"{fn}: mask has shape {tuple(mask_array.shape)}, routed_experts "
                    f"{tuple(array.shape[:2])} rows")
    bs = array.shape[0]
    offsets = [_index(o, fn, f"offsets[{i}]")
               for i, o in enumerate(_per_request(offsets, bs, 0, fn, "offsets"))]
    request_ids = _per_request(request_ids, bs, "", fn, "request_ids")
    out = []
    for b in range(bs):
        rid = _string(request_ids[b], fn, f"request_ids[{b}]")
        sample, m = array[b], mask_array[b]
        stray = ~m & np.any(sample != 0, axis=(1, 2))
        if stray.any():
            i = int(np.flatnonzero(stray)[0])
            raise Error(f"{fn}: sample {b} index {i} holds expert ids but its mask is False: "
                        f"ids and mask are misaligned")
        rows = np.flatnonzero(m)
        if rows.size == 0:
            empty = np.zeros((0, info.num_columns, info.top_k), np.int64)
            out.append(_make_routes(info, empty, np.zeros((0, info.num_columns), bool),
                                    request_id=rid, first_position=0, model=model,
                                    placement_version=placement_version, fn=fn))
            continue
        lo, hi = int(rows[0]), int(rows[-1]) + 1
        first = lo - offsets[b]
        if first < 0:
            raise Error(f"{fn}: sample {b} has a route at index {lo}, before its position 0 at "
                        f"offset {offsets[b]}")
        try:
            got, got_valid = _ids_from_array(sample[rows], info, rows - offsets[b],
                                             all_layers=layers == "all",
                                             unrecorded=unrecorded, dense=dense, fn=fn)
        except Error as error:
            raise Error(f"{error} (sample {b})") from None
        ids = np.zeros((hi - lo, info.num_columns, info.top_k), np.int64)
        valid = np.zeros((hi - lo, info.num_columns), bool)
        ids[rows - lo] = got
        valid[rows - lo] = got_valid
        out.append(_make_routes(info, ids, valid, request_id=rid, first_position=first,
                                model=model, placement_version=placement_version, fn=fn))
    return out


# ---------------------------------------------------------------------------------------------
# slime
# ---------------------------------------------------------------------------------------------


def to_slime(routes: Any, *, allow_invalid: bool = False) -> np.ndarray:
    """`routes` (one request, from position 0) as slime's ``Sample.rollout_routed_experts``
    (THUDM/slime HEAD 624b824a, ``slime/utils/types.py``): int32 ``[len(tokens) - 1, L, K]``,
    L = ``num_layers``, ALL decoder layers (slime picks the MoE ones by ``moe_layer_freq`` when
    it replays), dense layers 0. slime asserts ``len(routes) == len(tokens) - 1``
    (``cp_utils.prepare_routed_experts_for_routing_replay``), so `routes` must start at position
    0 and cover the whole finished sequence. (slime receives the array from SGLang's int32 wire,
    ``to_sglang``.)

    Not-valid rows are an error naming the first one; ``allow_invalid=True`` writes them as 0
    (slime's own validation then fails a MoE layer that is all 0).
    """
    fn = "to_slime"
    routes = _one_routes(routes, fn)
    layout = _Layout(routes.layout, fn)
    if routes.first_position != 0:
        raise Error(f"{fn}: {_request_name(routes)} starts at position "
                    f"{routes.first_position}; slime's routes cover the whole sequence from "
                    f"position 0 (len(tokens) - 1 rows)")
    dtype = np.dtype(np.int32)
    _check_holds(dtype, layout, fn)
    if not allow_invalid:
        _refuse_invalid(routes, layout, fn, "slime's format")
    return _all_layers(routes, layout, dtype, fn)


def from_slime(routed_experts: Any, layout: Any, request_id: str = "", *,
               num_tokens: int | None = None, model: str = "", placement_version: int = 0,
               unrecorded: str = "error", dense: str = "error") -> Any:
    """Routes of one request from slime's ``rollout_routed_experts`` (the format of
    ``to_slime``): int32 ``[rows, L, K]``, L = all decoder layers, rows = positions
    ``[0, len(tokens) - 1)``. ``num_tokens``: ``len(tokens)``, if known: the row count must
    then be ``num_tokens - 1``. Checks as in ``from_sglang``.
    """
    fn = "from_slime"
    info = _Layout(layout, fn)
    _string(request_id, fn, "request_id")
    if num_tokens is not None:
        num_tokens = _index(num_tokens, fn, "num_tokens")
    _options(fn, unrecorded, dense)
    array = _integer_array(routed_experts, fn, "routed_experts", 3, ("int32",))
    _full_from_array(array, info, fn, "routed_experts")
    _check_rows(array.shape[0], num_tokens, 0, fn)
    ids, valid = _ids_from_array(array, info, np.arange(array.shape[0]), all_layers=True,
                                 unrecorded=unrecorded, dense=dense, fn=fn)
    return _make_routes(info, ids, valid, request_id=request_id, first_position=0, model=model,
                        placement_version=placement_version, fn=fn)
