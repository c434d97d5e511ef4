"""Routed expert ids bit-packed for transport or storage: each id in ceil(log2(num_experts))
bits, so 384 experts (Kimi K2) take 9 bits where uint16 takes 16, and 160 experts 8 where
int32 takes 32. The route recorders keep whole bytes (uint8 / uint16 / int32), which the
device writes without read-modify-write; packing is for what leaves them.

    packed = pack_ids(routes.ids, routes.layout.num_experts)   # bytes
    ids = unpack_ids(packed, routes.ids.shape, routes.layout.num_experts)
"""
from __future__ import annotations

import numpy as np

from .._core import Error


def bits_per_id(num_experts: int) -> int:
    """The bits one id of [0, num_experts) takes: ceil(log2(num_experts)), at least 1."""
    if num_experts < 1:
        raise Error(f"bits_per_id: {num_experts} experts")
    return max(1, int(num_experts - 1).bit_length())


def pack_ids(ids, num_experts: int) -> bytes:
    """ids (any integer array, every value in [0, num_experts)) as bytes, bits_per_id bits
    each, most significant bit first, in row-major order; the last byte zero-padded."""
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
    int32 that holds them, unless given). moestat.Error when the bytes are not what that many
    ids take, or a value is outside [0, num_experts)."""
    shape = tuple(int(size) for size in shape)
    count = int(np.prod(shape, dtype=np.int64))
    bits = bits_per_id(num_experts)
    expected = (count * bits + 7) // 8
    if len(packed) != expected:
        raise Error(f"unpack_ids: {len(packed)} bytes; {count} ids of {bits} bits take "
                    f"{expected}")
    flat = np.unpackbits(np.frombuffer(packed, dtype=np.uint8))[:count * bits]
    weights = (np.uint64(1) << np.arange(bits - 1, -1, -1, dtype=np.uint64))
    values = (flat.reshape(count, bits).astype(np.uint64) * weights).sum(axis=1)
    if count and values.max() >= num_experts:
        raise Error(f"unpack_ids: a value outside [0, {num_experts}): not ids of that many "
                    "experts")
    if dtype is None:
        dtype = np.uint8 if num_experts <= 256 else np.uint16 if num_experts <= 65536 else np.int32
    return values.astype(dtype).reshape(shape)
