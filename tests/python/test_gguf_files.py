"""llama-imatrix's GGUF counts through Python: moestat.file_format and moestat.read_counts read
them as the C++ reader does (tests/io/gguf_test.cpp has the refusals; tests/llama_cpp reads
files llama.cpp itself wrote). The file is laid out here from the GGUF description."""
import struct

import numpy as np
import pytest

import moestat


def gguf_string(text):
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def imatrix(layers):
    """An imatrix as llama-imatrix writes it: per (block, counts), the gate, up and down expert
    tensors' .counts, F32 [1, E], 32-byte aligned data."""
    tensors = []
    for block, counts in layers:
        for part in ("gate", "up", "down"):
            tensors.append((f"blk.{block}.ffn_{part}_exps.weight.counts",
                            np.asarray(counts, dtype="<f4")))
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1)
    header += gguf_string("general.type") + struct.pack("<I", 8) + gguf_string("imatrix")
    data = b""
    for name, values in tensors:
        header += gguf_string(name) + struct.pack("<IQQIQ", 2, 1, len(values), 0, len(data))
        data += values.tobytes()
        data += b"\0" * (-len(data) % 32)
    header += b"\0" * (-len(header) % 32)
    return header + data


def test_read_counts_reads_an_imatrix(tmp_path):
    path = tmp_path / "imatrix.gguf"
    path.write_bytes(imatrix([(1, [5, 0, 7, 12]), (2, [1, 2, 3, 18])]))
    assert moestat.file_format(path) == "gguf"
    counts = moestat.read_counts(path)
    assert not counts["has_window_axis"]
    np.testing.assert_array_equal(counts["counts"],
                                  [[0, 0, 0, 0], [5, 0, 7, 12], [1, 2, 3, 18]])


def test_read_counts_refuses_counts_that_are_not_whole(tmp_path):
    path = tmp_path / "imatrix.gguf"
    path.write_bytes(imatrix([(0, [1.5, 2])]))
    with pytest.raises(moestat.Error, match=r"imatrix.gguf: .*counts\"\[0\] is 1.5"):
        moestat.read_counts(path)
