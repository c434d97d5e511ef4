"""Routed expert ids bit-packed for transport or storage: each id in ceil(log2(num_experts))
bits, so 384 experts (Kimi K2) take 9 bits where uint16 takes 16, and 160 experts 8 where
int32 takes 32. The route recorders keep whole bytes (uint8 / uint16 / int32), which the
device writes without read-modify-write; packing is for what leaves them.

    packed = pack_ids(routes.ids, routes.layout.num_experts)   # bytes
    ids = unpack_ids(packed, routes.ids.shape, routes.layout.num_experts)
"""
from __future__ import annotations

import math

import numpy as np

from .._core import Error
from ._checks import int_arg

# Ids are packed from and unpacked to 64-bit integers: at most 63 bits an id, so that every
# id also fits int64.
_MAX_EXPERTS = 1 << 63


def _experts(num_experts, fn: str) -> int:
    num_experts = int_arg(num_experts, fn, "num_experts", minimum=None, maximum=None)
    if not 1 <= num_experts <= _MAX_EXPERTS:
        raise Error(f"{fn}: {num_experts} experts; ids are packed for 1 to 2^63 experts")
    return num_experts


def bits_per_id(num_experts: int) -> int:
    """The bits one id of [0, num_experts) takes: ceil(log2(num_experts)), at least 1.
    moestat.Error outside 1 to 2^63 experts."""
    return max(1, _experts(num_experts, "bits_per_id") - 1).bit_length()


def pack_ids(ids, num_experts: int) -> bytes:
    """ids (any integer array, every value in [0, num_experts)) as bytes, bits_per_id bits
    each, most significant bit first, in row-major order; the last byte zero-padded."""
    num_experts = _experts(num_experts, "pack_ids")
    ids = np.asarray(ids)
    if ids.dtype.kind not in "iu":
        raise Error(f"pack_ids: ids must be integers, got {ids.dtype}")
    if ids.size and (ids.min() < 0 or ids.max() >= num_experts):
        raise Error(f"pack_ids: an id outside [0, {num_experts})")
    bits = bits_per_id(num_experts)
    values = ids.reshape(-1).astype(np.uint64)
    shifts = np.arange(bits - 1, -1, -1, dtype=np.uint64)
    matrix = ((values[:, None] >> shifts) & np.uint64(1)).astype(np.uint8)
    return np.packbits(matrix.reshape(-1)).tobytes()


def unpack_ids(packed: bytes, shape, num_experts: int, dtype=None) -> np.ndarray:
    """The ids pack_ids packed, as an array of shape (dtype: the narrowest of uint8, uint16,
    int32, int64 that holds them, unless given). moestat.Error when the bytes are not what that
    many ids take, or a value is outside [0, num_experts)."""
    fn = "unpack_ids"
    num_experts = _experts(num_experts, fn)
    if not isinstance(packed, (bytes, bytearray, memoryview)):
        raise TypeError(f"{fn}: packed must be bytes, got {type(packed).__name__}")
    try:
        sizes = list(shape)
    except TypeError:
        raise TypeError(f"{fn}: shape must be a sequence of ints, got "
                        f"{type(shape).__name__}") from None
    shape = tuple(int_arg(size, fn, "shape", minimum=None, maximum=None) for size in sizes)
    if any(size < 0 for size in shape):
        raise Error(f"{fn}: shape {list(shape)} has a negative size")
    count = math.prod(shape)
    bits = bits_per_id(num_experts)
    expected = (count * bits + 7) // 8
    if len(packed) != expected:
        raise Error(f"{fn}: {len(packed)} bytes; {count} ids of {bits} bits take "
                    f"{expected}")
    flat = np.unpackbits(np.frombuffer(packed, dtype=np.uint8))[:count * bits]
    weights = (np.uint64(1) << np.arange(bits - 1, -1, -1, dtype=np.uint64))
    values = (flat.reshape(count, bits).astype(np.uint64) * weights).sum(axis=1)
    if count and values.max() >= num_experts:
        raise Error(f"{fn}: a value outside [0, {num_experts}): not ids of that many "
                    "experts")
    if dtype is None:
        dtype = (np.uint8 if num_experts <= 256 else np.uint16 if num_experts <= 65536 else
                 np.int32 if num_experts <= 1 << 31 else np.int64)
    return values.astype(dtype).reshape(shape)
