"""Routes in SGLang's ``meta_info["routed_experts"]``: base64 of a raw little-endian
``[rows, L, K]`` array, int32 in SGLang 0.5.23 (main after it: also uint16 and uint8)."""
from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._core import Error
from ._checks import LayoutFields, b64decode, int_array, one_request_arg
from ._rows import all_layers, request_args, request_from_all_layers

__all__ = ["SGLANG_WIRE_DTYPES", "from_sglang", "to_sglang"]

#: The dtype names SGLang's ``meta_info["routed_experts_dtype"]`` may carry (upstream main after
#: 0.5.23, ``routed_experts_wire._WIRE_DTYPES``); 0.5.23 sends int32 and no dtype field.
SGLANG_WIRE_DTYPES = ("int32", "uint16", "uint8")


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
    routes = one_request_arg(routes, fn)
    wire = _sglang_dtype(dtype, fn, "dtype")
    layout = LayoutFields(routes.layout, fn)
    full = all_layers(routes, layout, wire, fn, target="SGLang's format",
                      allow_invalid=allow_invalid)
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
    ids (see ``moestat.routing``'s docstring); ids of the layout's dense layers must be 0
    unless ``dense="ignore"``. Errors: base64 that does not decode, a byte length that is not a
    whole number of ``[L, K]`` rows of the dtype, ids outside [0, E), a repeated id in a row.
    """
    fn = "from_sglang"
    info, first_position, num_tokens = request_args(fn, layout, first_position, request_id,
                                                     num_tokens, unrecorded, dense)
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
        raw = b64decode(payload, fn, "routed_experts")
        row_bytes = L * K * wire.itemsize
        if len(raw) % row_bytes:
            raise Error(f"{fn}: routed_experts holds {len(raw)} bytes, not a whole number of "
                        f"rows of {L} layers x {K} ids x {wire.itemsize} bytes ({wire.name}): "
                        f"a wrong layout or dtype, or a truncated payload")
        array = np.frombuffer(raw, dtype=wire).reshape(-1, L, K)
    else:
        array = int_array(payload, fn, "routed_experts", (1, 3))
        if array.ndim == 1:
            if array.size % (L * K):
                raise Error(f"{fn}: routed_experts holds {array.size} ids, not a whole number "
                            f"of rows of {L} layers x {K} ids")
            array = array.reshape(-1, L, K)
    return request_from_all_layers(array, info, first_position=first_position,
                                   num_tokens=num_tokens, request_id=request_id, model=model,
                                   placement_version=placement_version, unrecorded=unrecorded,
                                   dense=dense, fn=fn)
