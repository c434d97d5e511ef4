"""Routes in vLLM 0.33.0's ``CompletionOutput.routed_experts``: ``[rows, L, K]`` uint8 (E <= 256)
or uint16; over HTTP, base64 of that array's ``.npy``."""
from __future__ import annotations

import base64
import io
import math
from typing import Any

import numpy as np

from .._core import Error
from ._checks import LayoutFields, b64decode, choice_arg, int_array, one_request_arg
from ._rows import all_layers, check_holds, request_args, request_from_all_layers

__all__ = ["from_vllm", "to_vllm"]

# vLLM 0.33.0's RoutedExpertsCapturer emits uint8/uint16; its HTTP protocol comment also lists
# int32.
_VLLM_DTYPES = ("uint8", "uint16", "int32")


def _vllm_dtype(layout: LayoutFields, fn: str) -> np.dtype:
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
    routes = one_request_arg(routes, fn)
    choice_arg(encoding, fn, "encoding", ("array", "base64"))
    layout = LayoutFields(routes.layout, fn)
    full = all_layers(routes, layout, _vllm_dtype(layout, fn), fn, target="vLLM's format",
                      allow_invalid=allow_invalid)
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
    raw = b64decode(text, fn, "routed_experts")
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
    info, first_position, num_tokens = request_args(fn, layout, first_position, request_id,
                                                     num_tokens, unrecorded, dense)
    if isinstance(routed_experts, str):
        routed_experts = _load_npy(routed_experts, fn)
    array = int_array(routed_experts, fn, "routed_experts", 3, _VLLM_DTYPES)
    check_holds(array.dtype, info, fn, ": the engine's ids were truncated, or the layout is "
                "not the engine's")
    return request_from_all_layers(array, info, first_position=first_position,
                                   num_tokens=num_tokens, request_id=request_id, model=model,
                                   placement_version=placement_version, unrecorded=unrecorded,
                                   dense=dense, fn=fn)
