"""The argument checks every converter of moestat.routing shares: types and ranges of its
arguments, the layout's fields, and the bound on what a converter may build (OUTPUT_BOUND).
Each raises moestat.Error naming the function and the argument, or TypeError for an argument
of the wrong Python type."""
from __future__ import annotations

import base64
import binascii
import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import _core
from .._core import Error

#: What a converter's output may take: (expansion, allowance) = 16 times the bytes of the
#: routes given (ids and validity) plus 1 GiB. Padded layouts and all-layer formats are a few
#: times their routes; the allowance holds ordinary batches whatever their padding.
OUTPUT_BOUND = (16, 1 << 30)
# The widest integers the C++ side takes: positions and counts are int64, versions uint64.
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1


class LayoutFields:
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


def int_arg(value: Any, fn: str, name: str, minimum: int | None = 0,
            maximum: int | None = INT64_MAX) -> int:
    """`value` as an int (no bool) in [minimum, maximum]; None leaves that side open."""
    if isinstance(value, bool):
        raise TypeError(f"{fn}: {name} must be an int, got bool")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__}") from None
    if minimum is not None and number < minimum:
        raise Error(f"{fn}: {name} must be >= {minimum}, got {number}")
    if maximum is not None and number > maximum:
        raise Error(f"{fn}: {name} must be <= {maximum}, got {number}")
    return number


def str_arg(value: Any, fn: str, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{fn}: {name} must be a str, got {type(value).__name__}")
    return value


def choice_arg(value: Any, fn: str, name: str, choices: Sequence[str]) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{fn}: {name} must be one of {', '.join(map(repr, choices))}, got "
                        f"{type(value).__name__}")
    if value not in choices:
        raise Error(f"{fn}: {name} must be one of {', '.join(map(repr, choices))}, got "
                    f"{value!r}")
    return value


def check_options(fn: str, unrecorded: str, dense: str | None = None) -> None:
    """The from_* options: what an unrecorded row and a dense layer's ids become."""
    choice_arg(unrecorded, fn, "unrecorded", ("error", "invalid"))
    if dense is not None:
        choice_arg(dense, fn, "dense", ("error", "ignore"))


def list_arg(values: Any, fn: str, name: str) -> list:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) and not (
            isinstance(values, np.ndarray) and values.ndim == 1):
        raise TypeError(f"{fn}: {name} must be a list, got {type(values).__name__}")
    return list(values)


def per_request(values: Any, count: int, default: Any, fn: str, name: str) -> list:
    """One value per request: `values` of `count` items, or `default` for each when None."""
    if values is None:
        return [default] * count
    values = list_arg(values, fn, name)
    if len(values) != count:
        raise Error(f"{fn}: {len(values)} {name} for {count} requests")
    return values


def per_request_offsets(offsets: Any, count: int, fn: str, minimum: int | None = 0) -> list:
    """Each request's offset in a batch (int_arg's range; default 0)."""
    return [int_arg(offset, fn, f"offsets[{i}]", minimum)
            for i, offset in enumerate(per_request(offsets, count, 0, fn, "offsets"))]


def as_array(value: Any, fn: str, name: str) -> np.ndarray:
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


def int_array(value: Any, fn: str, name: str, ndim: int | tuple[int, ...],
              dtypes: Sequence[str] | None = None) -> np.ndarray:
    """`value` as an array of `ndim` dimensions (or one of them) and an integer dtype (one of
    `dtypes` when given)."""
    array = as_array(value, fn, name)
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


def b64decode(text: str, fn: str, name: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as error:
        raise Error(f"{fn}: {name} is not valid base64 ({error})") from None


def one_request_arg(routes: Any, fn: str) -> Any:
    if not isinstance(routes, _core.RoutedExperts):
        raise TypeError(f"{fn}: routes must be a moestat.RoutedExperts (one request), "
                        f"got {type(routes).__name__}")
    return routes


def routes_arg(routes: Any, fn: str) -> list:
    """A non-empty list of RoutedExperts from one of them or a list of them."""
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


def common_layout(routes: list, fn: str) -> LayoutFields:
    """The layout every one of `routes` has: one batch holds one model."""
    layout = LayoutFields(routes[0].layout, fn)
    for i, r in enumerate(routes[1:], 1):
        other = LayoutFields(r.layout, fn)
        if other.key() != layout.key():
            raise Error(f"{fn}: routes[{i}] has layout ({other.describe()}), routes[0] has "
                        f"({layout.describe()}): one batch holds one model")
    return layout


def check_output(fn: str, shape: Sequence[int], dtype: Any, routes: Sequence) -> None:
    """Error unless an array of `shape` and `dtype` fits OUTPUT_BOUND for `routes`: checked
    before it is allocated (numpy would take the memory, or raise MemoryError)."""
    size = math.prod(int(n) for n in shape) * np.dtype(dtype).itemsize
    given = sum(r.num_tokens * r.layout.bytes_per_token for r in routes)
    expansion, allowance = OUTPUT_BOUND
    if size > expansion * given + allowance:
        raise Error(f"{fn}: the output would be {size:,} bytes ({np.dtype(dtype).name} "
                    f"{list(shape)}), more than {expansion} times the {given:,} bytes of the "
                    f"routes plus {allowance >> 30} GiB: positions, offsets or seq_len far past "
                    f"the routes' rows, or a layout of far more decoder layers than MoE ones")
