"""Hostile routes files and converter arguments (issue 39): every one is refused with a
one-line moestat.Error (or TypeError for a wrong Python type) before any memory out of
proportion to the input is taken, and whatever write_routes writes, read_routes reads back."""
import base64
import io
import json
import struct

import numpy as np
import pytest

import moestat
from moestat.routing import (
    bits_per_id,
    from_megatron,
    from_sglang,
    from_vllm,
    pack_ids,
    padded_batch,
    to_megatron,
    to_sglang,
    to_verl,
    to_vllm,
    unpack_ids,
)

MAX_EXPERTS = (1 << 31) - 1
MAX_POSITION = 1 << 62


def error(pattern):
    return pytest.raises(moestat.Error, match=pattern)


def routes_file(layout, requests, ids=b"", ids_dtype="U8", ids_shape=None, valid=b""):
    """A routes file's bytes built by hand (the writer refuses what these tests need)."""
    columns = len(layout["layers"])
    tokens = sum(r["num_tokens"] for r in requests)
    ids_shape = ids_shape or [tokens, columns, layout["top_k"]]
    header = {
        "__metadata__": {"format": "moestat.routes", "version": "1",
                         "layout": json.dumps(layout), "requests": json.dumps(requests)},
        "ids": {"dtype": ids_dtype, "shape": ids_shape, "data_offsets": [0, len(ids)]},
        "valid": {"dtype": "BOOL", "shape": [tokens, columns],
                  "data_offsets": [len(ids), len(ids) + len(valid)]},
    }
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + ids + valid


def request(request_id="r", first_position=0, num_tokens=0, placement_version=0):
    return {"request_id": request_id, "first_position": first_position,
            "num_tokens": num_tokens, "model": "", "placement_version": placement_version}


def read(tmp_path, data):
    path = tmp_path / "routes.safetensors"
    path.write_bytes(data)
    return moestat.read_routes(path)


def round_trip(tmp_path, routes):
    path = tmp_path / "round_trip.safetensors"
    moestat.write_routes(path, routes)
    return moestat.read_routes(path)


# ---------------------------------------------------------------------------------------------
# The reader: memory and CPU
# ---------------------------------------------------------------------------------------------


def test_a_huge_top_k_without_tokens_reads_without_allocating_it(tmp_path):
    # A 432-byte file took 16.8 GB and 48 s: validate() allocated a top_k-long row.
    layout = {"num_decoder_layers": 2, "layers": [0, 1], "num_experts": MAX_EXPERTS,
              "top_k": MAX_EXPERTS}
    (routes,) = read(tmp_path, routes_file(layout, [request()], ids_dtype="I32"))
    assert routes.num_tokens == 0 and routes.layout.top_k == MAX_EXPERTS
    empty = moestat.RoutedExperts(routes.layout, np.zeros((0, 2, MAX_EXPERTS), np.int32))
    assert empty.num_tokens == 0
    # 20 empty requests of top_k 2^27 took 28 s.
    wide = dict(layout, num_experts=1 << 27, top_k=1 << 27)
    requests = [request(f"r{i}") for i in range(20)]
    assert len(read(tmp_path, routes_file(wide, requests, ids_dtype="I32"))) == 20


def test_many_empty_requests_of_a_long_layout_stay_within_the_read_bound(tmp_path):
    # 100k layers x 2000 empty requests in a 907 KB file took 1.6 GB: each request copies the
    # layout's layers. (The cap on decoder layers is 65536 now.)
    layers = list(range(60000))
    layout = {"num_decoder_layers": 60000, "layers": layers, "num_experts": 8, "top_k": 2}
    requests = [request(f"r{i}") for i in range(2000)]
    with error(r"routes file: its 2000 requests would take [\d,]+ bytes of memory once read, "
               r"more than 16 times its \d+ bytes plus 1 MiB"):
        read(tmp_path, routes_file(layout, requests))
    assert len(read(tmp_path, routes_file(layout, requests[:2]))) == 2


@pytest.mark.parametrize("key, text, message", [
    ("requests", "[" * 100 + "]" * 100, "nested more than 64 deep"),
    ("layout", '{"num_decoder_layers": 2, "layers": [0], "num_experts": 4, "top_k": 2, '
               '"top_k": 1}', 'the key "top_k" appears twice'),
])
def test_metadata_is_parsed_with_the_json_readers_bounds(tmp_path, key, text, message):
    layout = {"num_decoder_layers": 2, "layers": [0], "num_experts": 4, "top_k": 2}
    data = routes_file(layout, [request()])
    header = json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])
    header["__metadata__"][key] = text
    encoded = json.dumps(header).encode()
    with error(f'routes file: the "{key}" metadata: .*{message}'):
        read(tmp_path, struct.pack("<Q", len(encoded)) + encoded)


def test_a_valid_byte_other_than_0_and_1_is_refused(tmp_path):
    layout = {"num_decoder_layers": 1, "layers": [0], "num_experts": 4, "top_k": 2}
    data = routes_file(layout, [request(num_tokens=1)], ids=bytes([1, 2]), valid=bytes([2]))
    with error("position 0 layer 0: valid byte 2 is neither 0 nor 1"):
        read(tmp_path, data)


# ---------------------------------------------------------------------------------------------
# Layouts the converters cannot afford
# ---------------------------------------------------------------------------------------------


def test_a_file_of_2_31_decoder_layers_is_refused_before_any_converter_sees_it(tmp_path):
    # It read fine; then to_megatron took 56 s and 18.9 GB, to_sglang raised MemoryError.
    layout = {"num_decoder_layers": (1 << 31) - 1, "layers": [0], "num_experts": 4, "top_k": 2}
    with error("2147483647 decoder layers; need 1 to 65536"):
        read(tmp_path, routes_file(layout, [request()]))
    with error("need 1 to 65536"):
        moestat.RouteLayout((1 << 31) - 1, [0], 4, 2)


def test_converters_refuse_an_output_far_larger_than_their_routes():
    # One MoE layer among 65536 decoder layers: 20000 tokens of 2 bytes would become 1.3 GB
    # of uint8 (vLLM) or 5.2 GB of int32 (SGLang).
    layout = moestat.RouteLayout(1 << 16, [0], 4, 1)
    routes = moestat.RoutedExperts(layout, np.ones((20000, 1, 1), np.uint8))
    for convert in (to_sglang, to_vllm):
        with error(rf"^{convert.__name__}: the output would be [\d,]+ bytes .*, more than 16 "
                   r"times the 40,000 bytes of the routes plus 1 GiB"):
            convert(routes)
    assert to_megatron(routes)[0].shape == (20000, 1)
    far = moestat.RoutedExperts(layout, np.ones((1, 1, 1), np.uint8), first_position=1 << 40)
    with error(r"^to_verl: the output would be"):
        to_verl(far)
    with error(r"^to_verl: the output would be"):
        to_verl(routes, seq_len=1 << 40)


def test_padded_batch_refuses_a_batch_far_past_its_rows():
    # first_position 1e9 asked numpy for 30 GiB.
    layout = moestat.RouteLayout(2, [0, 1], 4, 2)
    routes = moestat.RoutedExperts(layout, np.zeros((0, 2, 2), np.uint8),
                                   first_position=10**9)
    with error(r"^padded_batch: the output would be 32,000,000,000 bytes"):
        padded_batch([routes])
    with error(r"^padded_batch: the output would be"):
        padded_batch([routes], offsets=[10**12])


@pytest.mark.parametrize("call, kind", [
    (lambda r: padded_batch([r], offsets=["1"]), TypeError),
    (lambda r: padded_batch([r], seq_len=2.5), TypeError),
    (lambda r: padded_batch([1]), TypeError),
    (lambda r: padded_batch(r, offsets=[1, 2]), moestat.Error),
    (lambda r: padded_batch([r], seq_len=-1), moestat.Error),
    (lambda r: padded_batch([]), moestat.Error),
    (lambda r: to_verl(r, offsets=[2**70]), moestat.Error),
    (lambda r: to_sglang(r, "int64"), moestat.Error),
    (lambda r: from_megatron(to_megatron(r), r.layout, 1), TypeError),
    (lambda r: from_megatron(to_megatron(r), r.layout, [2**70]), moestat.Error),
    (lambda r: from_sglang(to_sglang(r), r.layout, placement_version=2**64), moestat.Error),
    (lambda r: from_sglang(to_sglang(r), object()), TypeError),
])
def test_bad_arguments_get_plain_errors(call, kind):
    layout = moestat.RouteLayout(2, [0, 1], 4, 2)
    routes = moestat.RoutedExperts(layout, np.array([[[0, 1], [2, 3]]], np.uint8))
    with pytest.raises(kind):
        call(routes)


# ---------------------------------------------------------------------------------------------
# vLLM's .npy payload
# ---------------------------------------------------------------------------------------------


def npy_base64(header_dict, body=b"", version=(1, 0)):
    text = repr(header_dict).encode("latin1")
    text += b" " * (63 - (len(text) + 10) % 64) + b"\n"
    size = struct.pack("<H" if version == (1, 0) else "<I", len(text))
    raw = b"\x93NUMPY" + bytes(version) + size + text + body
    return base64.b64encode(raw).decode()


def test_vllm_npy_declaring_more_than_it_holds_is_refused_before_allocating():
    # A .npy declaring 64 GiB with 8 bytes raised MemoryError.
    layout = moestat.RouteLayout(2, [0, 1], 4, 2)
    forged = npy_base64({"descr": "|u1", "fortran_order": False, "shape": (1 << 34, 2, 2)},
                        bytes(8))
    with error(r"^from_vllm: routed_experts' \.npy header declares uint8 \[17179869184, 2, 2\] "
               r"\(68,719,476,736 bytes\), but 8 bytes follow it$"):
        from_vllm(forged, layout)


def test_vllm_npy_header_over_numpys_limit_says_so():
    # It was called "a .npy of Python objects".
    layout = moestat.RouteLayout(2, [0, 1], 4, 2)
    header = {"descr": "|u1", "fortran_order": False, "shape": (1, 2, 2), "x": " " * 20000}
    with error(r"^from_vllm: routed_experts' \.npy header is longer than numpy reads"):
        from_vllm(npy_base64(header, bytes(4), version=(2, 0)), layout)


def test_vllm_npy_of_the_engine_still_reads():
    layout = moestat.RouteLayout(2, [0, 1], 4, 2)
    routes = moestat.RoutedExperts(layout, np.array([[[0, 1], [2, 3]]], np.uint8))
    buffer = io.BytesIO()
    np.save(buffer, np.asfortranarray(to_vllm(routes)), allow_pickle=False)
    back = from_vllm(base64.b64encode(buffer.getvalue()).decode(), layout)
    np.testing.assert_array_equal(back.ids, routes.ids)


# ---------------------------------------------------------------------------------------------
# Written means readable; one id once
# ---------------------------------------------------------------------------------------------


def test_every_value_the_writer_takes_reads_back(tmp_path):
    layout = moestat.RouteLayout(1 << 16, [0, (1 << 16) - 1], MAX_EXPERTS, 2)
    ids = np.array([[[MAX_EXPERTS - 1, 0], [0, 1]]], np.int32)
    last = moestat.RoutedExperts(layout, ids, request_id="last",
                                 first_position=MAX_POSITION - 1,
                                 placement_version=(1 << 64) - 1)
    end = moestat.RoutedExperts(layout, np.zeros((0, 2, 2), np.int32), request_id="end",
                                first_position=MAX_POSITION)
    assert round_trip(tmp_path, [last, end]) == [last, end]
    # One past: refused where the routes are made, so nothing unreadable is ever written.
    with error("positions must stay in"):
        moestat.RoutedExperts(layout, ids, first_position=MAX_POSITION)
    with error("need 1 to 65536"):
        moestat.RouteLayout((1 << 16) + 1, [0], 4, 2)


def test_a_request_id_twice_is_refused_by_writer_and_reader(tmp_path):
    # Two take()s of one request became two requests of one id; a dict kept the second.
    layout = moestat.RouteLayout(2, [0, 1], 4, 2)
    routes = moestat.RoutedExperts(layout, np.array([[[0, 1], [2, 3]]], np.uint8),
                                   request_id="a")
    later = moestat.RoutedExperts(layout, np.array([[[1, 0], [3, 2]]], np.uint8),
                                  request_id="a", first_position=1)
    with error(r'requests\[0\] and requests\[1\] are both request "a"'):
        moestat.write_routes(tmp_path / "twice.safetensors", [routes, later])
    routes.append(later)
    assert round_trip(tmp_path, [routes])[0].num_tokens == 2
    spec = {"num_decoder_layers": 1, "layers": [0], "num_experts": 4, "top_k": 2}
    data = routes_file(spec, [request("x", num_tokens=1), request("x", 1, num_tokens=1)],
                       ids=bytes([0, 1, 0, 1]), valid=bytes([1, 1]))
    with error('are both request "x"'):
        read(tmp_path, data)


# ---------------------------------------------------------------------------------------------
# Bit packing
# ---------------------------------------------------------------------------------------------


def test_pack_ids_refuses_more_experts_than_64_bit_ids_hold():
    # 2^70 experts turned 2^62 into 0 silently.
    with error(r"^pack_ids: 1180591620717411303424 experts; ids are packed for 1 to 2\^63"):
        pack_ids(np.array([1 << 62], np.int64), 1 << 70)
    packed = pack_ids(np.array([1 << 62], np.int64), 1 << 63)
    assert unpack_ids(packed, (1,), 1 << 63)[0] == 1 << 62
    assert bits_per_id(1 << 63) == 63
    with error("^bits_per_id: 0 experts"):
        bits_per_id(0)
    with pytest.raises(TypeError, match="num_experts must be an int, got float"):
        bits_per_id(8.0)
    with pytest.raises(TypeError, match="shape must be an int, got str"):
        unpack_ids(b"", ("x",), 8)
    with pytest.raises(TypeError, match="^unpack_ids: shape must be a sequence of ints, got int"):
        unpack_ids(b"", 5, 8)
    with error(r"^unpack_ids: shape \[-1, -2\] has a negative size"):
        unpack_ids(b"", (-1, -2), 8)
    with error(r"^unpack_ids: 0 bytes; 18446744073709551616 ids of 3 bits take"):
        unpack_ids(b"", (1 << 32, 1 << 32), 8)
