"""moestat.routing's converters between moestat.RoutedExperts and the routed-experts formats of
SGLang 0.5.23 (+ main's narrow dtypes), vLLM 0.33.0, Megatron-Core RouterReplay, verl and slime:
exact round trips (dense layers, narrow dtypes, start_len / prompt_start tails), and one-line
moestat.Error for hostile inputs. SGLang's own decoder is run on to_sglang's output in
tests/engines/test_sglang_routes_wire.py."""
import base64
import io
import pickle

import numpy as np
import pytest

import moestat
from moestat.routing import (
    SGLANG_WIRE_DTYPES,
    from_megatron,
    from_sglang,
    from_slime,
    from_verl,
    from_vllm,
    to_megatron,
    to_sglang,
    to_slime,
    to_verl,
    to_vllm,
)

# 6 decoder layers, 0 and 3 dense (DeepSeek-style first_k_dense plus an interleaved one).
DENSE = dict(num_decoder_layers=6, layers=[1, 2, 4, 5], num_experts=8, top_k=2)
ALL_MOE = dict(num_decoder_layers=3, layers=[0, 1, 2], num_experts=16, top_k=4)
WIDE = dict(num_decoder_layers=4, layers=[1, 3], num_experts=300, top_k=3)  # uint16 ids
EDGE = dict(num_decoder_layers=2, layers=[1], num_experts=256, top_k=8)  # largest uint8
TOP1 = dict(num_decoder_layers=2, layers=[0, 1], num_experts=4, top_k=1)


def layout_of(spec):
    return moestat.RouteLayout(spec["num_decoder_layers"], spec["layers"], spec["num_experts"],
                               spec["top_k"])


def random_ids(rng, layout, num_tokens):
    """[num_tokens, C, K] distinct ids per row, the extremes 0 and E-1 included."""
    C, K, E = layout.num_columns, layout.top_k, layout.num_experts
    ids = np.argsort(rng.random((num_tokens, C, E)), axis=2)[:, :, :K]
    if num_tokens:
        ids[0, 0] = np.r_[E - 1, np.arange(K - 1)]
    return ids


def make_routes(rng, spec, num_tokens=5, first_position=0, request_id="req", invalid=()):
    """Routes of `num_tokens` random rows; `invalid`: (row, column) pairs not valid."""
    layout = layout_of(spec)
    ids = random_ids(rng, layout, num_tokens)
    valid = np.ones((num_tokens, layout.num_columns), dtype=bool)
    for t, c in invalid:
        valid[t, c] = False
        ids[t, c] = 0
    return moestat.RoutedExperts(layout, ids, valid=valid, request_id=request_id,
                                 first_position=first_position)


def assert_same(got, want, request_id=None):
    assert got.layout.num_decoder_layers == want.layout.num_decoder_layers
    assert list(got.layout.layers) == list(want.layout.layers)
    assert got.layout.num_experts == want.layout.num_experts
    assert got.layout.top_k == want.layout.top_k
    assert got.ids.dtype == want.layout.id_dtype
    np.testing.assert_array_equal(got.ids, want.ids)
    np.testing.assert_array_equal(got.valid, want.valid)
    assert got.first_position == want.first_position
    assert got.num_tokens == want.num_tokens
    assert got.request_id == (want.request_id if request_id is None else request_id)
    if request_id is None:
        assert got == want


def all_layers(routes, dtype):
    """The expected [T, L, K] array of an all-layers format: MoE columns in place, dense 0."""
    layout = routes.layout
    full = np.zeros((routes.num_tokens, layout.num_decoder_layers, layout.top_k), dtype=dtype)
    full[:, list(layout.layers), :] = routes.ids
    return full


def error(pattern):
    return pytest.raises(moestat.Error, match=pattern)


def sglang_raw(b64, dtype=np.int32):
    return np.frombuffer(base64.b64decode(b64), dtype=np.dtype(dtype).newbyteorder("<"))


def b64_npy(array, allow_pickle=False):
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def test_the_package_reexports_each_formats_converters():
    import moestat.routing as routing
    from moestat.routing import megatron, sglang, slime, verl, vllm

    for module in (sglang, vllm, megatron, verl, slime):
        for name in module.__all__:
            assert name in routing.__all__ and getattr(routing, name) is getattr(module, name)
    assert SGLANG_WIRE_DTYPES == ("int32", "uint16", "uint8")
    assert routing.OUTPUT_BOUND == (16, 1 << 30)


# ---------------------------------------------------------------------------------------------
# SGLang
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [DENSE, ALL_MOE, WIDE, EDGE, TOP1])
@pytest.mark.parametrize("dtype", SGLANG_WIRE_DTYPES)
def test_sglang_round_trip(rng, spec, dtype):
    routes = make_routes(rng, spec, num_tokens=7, first_position=3, request_id="r-1")
    if np.iinfo(dtype).max < spec["num_experts"] - 1:
        with error(rf"^to_sglang: {dtype} holds expert ids up to \d+, the layout has "
                   rf"{spec['num_experts']} experts$"):
            to_sglang(routes, dtype=dtype)
        return
    meta = to_sglang(routes, dtype=dtype)
    assert set(meta) == ({"routed_experts"} if dtype == "int32"
                         else {"routed_experts", "routed_experts_dtype"})
    if dtype != "int32":
        assert meta["routed_experts_dtype"] == dtype
    # The wire: raw little-endian [rows, L, K], dense layers 0.
    raw = sglang_raw(meta["routed_experts"], dtype)
    np.testing.assert_array_equal(raw.reshape(-1, spec["num_decoder_layers"], spec["top_k"]),
                                  all_layers(routes, dtype))
    back = from_sglang(meta, routes.layout, 3, "r-1")
    assert_same(back, routes)
    assert back.complete
    # The whole /generate response, the OpenAI sglext dict, and the dtype given separately.
    assert_same(from_sglang({"meta_info": meta, "text": "x"}, routes.layout, 3, "r-1"), routes)
    assert_same(from_sglang(dict(meta), routes.layout, first_position=3, request_id="r-1"),
                routes)
    assert_same(from_sglang(meta["routed_experts"], routes.layout, 3, "r-1", dtype=dtype), routes)


def test_sglang_int32_is_the_default_and_reads_legacy_payloads(rng):
    routes = make_routes(rng, DENSE)
    meta = to_sglang(routes)
    assert list(meta) == ["routed_experts"]
    # What SGLang 0.5.23's extract_routed_experts_from_meta_info returns: a flat int32 array.
    flat = np.frombuffer(base64.b64decode(meta["routed_experts"]), dtype=np.int32)
    assert flat.size == routes.num_tokens * 6 * 2
    assert_same(from_sglang(flat, routes.layout, request_id="req"), routes)
    assert_same(from_sglang(flat.reshape(-1, 6, 2), routes.layout, request_id="req"), routes)
    assert_same(from_sglang(meta["routed_experts"], routes.layout, request_id="req"), routes)


def test_sglang_start_len_is_the_tail_of_the_full_response(rng):
    # A request of seqlen tokens: rows for positions [start_len, seqlen - 1).
    seqlen, start_len = 12, 5
    full = make_routes(rng, DENSE, num_tokens=seqlen - 1, first_position=0)
    tail = moestat.RoutedExperts(full.layout, full.ids[start_len:], request_id="req",
                                 first_position=start_len)
    full_raw = sglang_raw(to_sglang(full)["routed_experts"])
    tail_raw = sglang_raw(to_sglang(tail)["routed_experts"])
    np.testing.assert_array_equal(full_raw[start_len * 6 * 2:], tail_raw)
    back = from_sglang(to_sglang(tail), full.layout, start_len, "req", num_tokens=seqlen)
    assert_same(back, tail)
    assert back.first_position == start_len and back.num_tokens == seqlen - 1 - start_len
    with error(r"^from_sglang: 6 rows, but a request of 13 tokens routed from position 5 has 7 "):
        from_sglang(to_sglang(tail), full.layout, start_len, num_tokens=seqlen + 1)
    # start_len == seqlen - 1 (SGLang clamps to it): no rows.
    empty = from_sglang({"routed_experts": ""}, full.layout, seqlen - 1, num_tokens=seqlen)
    assert empty.num_tokens == 0 and empty.first_position == seqlen - 1


def test_sglang_invalid_rows_are_refused_unless_allowed(rng):
    routes = make_routes(rng, DENSE, num_tokens=4, first_position=10, request_id="q",
                         invalid=[(2, 1), (3, 0)])
    with error(r"^to_sglang: request 'q' has 2 unrecorded \(not valid\) layer rows, the first "
               r"at position 12 layer 2; SGLang's format cannot mark a row not recorded: pass "
               r"allow_invalid=True to write their ids as 0$"):
        to_sglang(routes)
    meta = to_sglang(routes, allow_invalid=True)
    raw = sglang_raw(meta["routed_experts"]).reshape(-1, 6, 2)
    assert (raw[2, 2] == 0).all() and (raw[3, 1] == 0).all()
    # Read back, the zero rows are unrecorded: an error, or not valid on request.
    with error(r"^from_sglang: position 12 layer 2 has ids \[0, 0\]: a row the engine did not "
               r"record \(2 such layer rows\); pass unrecorded='invalid' to keep them as not "
               r"valid$"):
        from_sglang(meta, routes.layout, 10, "q")
    assert_same(from_sglang(meta, routes.layout, 10, "q", unrecorded="invalid"), routes)


def test_sglang_minus_one_rows_are_unrecorded(rng):
    layout = layout_of(DENSE)
    array = all_layers(make_routes(rng, DENSE, num_tokens=3), np.int32)
    array[1, 4] = -1
    with error(r"^from_sglang: position 1 layer 4 has ids \[-1, -1\]: a row the engine did not"):
        from_sglang(array, layout)
    back = from_sglang(array, layout, unrecorded="invalid")
    assert not back.valid[1, 2] and back.valid.sum() == 3 * 4 - 1
    assert (back.ids[1, 2] == 0).all()


def test_sglang_top1_zero_is_expert_zero(rng):
    layout = layout_of(TOP1)
    array = np.zeros((3, 2, 1), np.int32)
    back = from_sglang(array, layout)
    assert back.complete and (back.ids == 0).all()


def test_sglang_dense_layer_ids_mean_a_wrong_layout(rng):
    routes = make_routes(rng, DENSE, num_tokens=3, first_position=4)
    array = all_layers(routes, np.int32)
    array[2, 3] = [5, 6]  # decoder layer 3 is dense in the layout
    with error(r"^from_sglang: decoder layer 3 is not a MoE layer of the layout but holds expert "
               r"ids \[5, 6\] at position 6: the layout \(6 decoder layers, MoE layers "
               r"\[1, 2, 4, 5\], 8 experts, top_k 2\) does not match the model "
               r"\(dense='ignore' drops such columns unread\)$"):
        from_sglang(array, routes.layout, 4)
    assert_same(from_sglang(array, routes.layout, 4, "req", dense="ignore"), routes)


@pytest.mark.parametrize("bad, message", [
    (-3, r"expert id -3 at position 1 layer 2 is outside \[0, 8\)"),
    (8, r"expert id 8 at position 1 layer 2 is outside \[0, 8\)"),
    (2**31 - 1, r"expert id 2147483647 at position 1 layer 2 is outside \[0, 8\)"),
])
def test_sglang_ids_out_of_range(rng, bad, message):
    routes = make_routes(rng, DENSE, num_tokens=3)
    array = all_layers(routes, np.int32)
    array[1, 2, 1] = bad
    payload = base64.b64encode(array.astype("<i4").tobytes()).decode()
    with error(rf"^from_sglang: {message}$"):
        from_sglang(payload, routes.layout)


def test_sglang_repeated_ids(rng):
    routes = make_routes(rng, DENSE, num_tokens=3)
    array = all_layers(routes, np.int32)
    array[2, 5] = [3, 3]
    with error(r"^from_sglang: position 2 layer 5 repeats an expert: ids \[3, 3\]$"):
        from_sglang(array, routes.layout)


def test_sglang_hostile_payloads(rng):
    routes = make_routes(rng, DENSE, num_tokens=3)
    layout = routes.layout
    b64 = to_sglang(routes)["routed_experts"]
    with error(r"^from_sglang: routed_experts is not valid base64 \("):
        from_sglang(b64[:-1], layout)  # truncated: bad padding
    with error(r"^from_sglang: routed_experts is not valid base64 \("):
        from_sglang(b64[:8] + "!" + b64[9:], layout)
    with error(r"^from_sglang: routed_experts is not valid base64 \("):
        from_sglang("AAAAé===", layout)
    # Valid base64 of a byte count that is not whole rows (truncated on a 4-char boundary).
    short = base64.b64encode(base64.b64decode(b64)[:-3]).decode()
    with error(r"^from_sglang: routed_experts holds 141 bytes, not a whole number of rows of 6 "
               r"layers x 2 ids x 4 bytes \(int32\): a wrong layout or dtype, or a truncated "
               r"payload$"):
        from_sglang(short, layout)
    # The right bytes read with the wrong layer count.
    with error(r"^from_sglang: routed_experts holds 144 bytes, not a whole number of rows of 5 "):
        from_sglang(b64, moestat.RouteLayout(5, [1, 2, 4], 8, 2))
    # 143 bytes of uint8 are not whole [6, 2] rows.
    with error(r"^from_sglang: routed_experts holds 143 bytes, not a whole number of rows of 6 "
               r"layers x 2 ids x 1 bytes \(uint8\)"):
        from_sglang(base64.b64encode(bytes(143)).decode(), layout, dtype="uint8")


@pytest.mark.parametrize("name", ["int64", "float32", "int16", "INT32", "", "bool"])
def test_sglang_unknown_dtype_names(rng, name):
    routes = make_routes(rng, DENSE)
    meta = to_sglang(routes)
    with error(rf"^from_sglang: routed_experts_dtype '{name}' is not one of int32, uint16, "
               rf"uint8$"):
        from_sglang({**meta, "routed_experts_dtype": name}, routes.layout)
    with error(rf"^to_sglang: dtype '{name}' is not one of int32, uint16, uint8$"):
        to_sglang(routes, dtype=name)
    with error(rf"^from_sglang: dtype '{name}' is not one of int32, uint16, uint8$"):
        from_sglang(meta, routes.layout, dtype=name)


def test_sglang_dtype_arguments(rng):
    routes = make_routes(rng, DENSE)
    meta = to_sglang(routes, dtype=np.uint16)
    assert meta["routed_experts_dtype"] == "uint16"
    assert_same(from_sglang(meta, routes.layout, request_id="req", dtype=np.dtype("uint16")),
                routes)
    with error(r"^from_sglang: dtype int32 given, but the response says routed_experts_dtype "
               r"uint16$"):
        from_sglang(meta, routes.layout, dtype="int32")
    with pytest.raises(TypeError, match=r"^to_sglang: dtype must be a dtype name \(int32, "
                                        r"uint16, uint8\) or a numpy dtype, got int$"):
        to_sglang(routes, dtype=3)
    with pytest.raises(TypeError, match=r"^from_sglang: routed_experts_dtype must be a dtype "
                                        r"name"):
        from_sglang({**meta, "routed_experts_dtype": 16}, routes.layout)
    with error(r"^to_sglang: dtype 'int64' is not one of int32, uint16, uint8$"):
        to_sglang(routes, dtype=np.int64)


def test_sglang_missing_field(rng):
    layout = layout_of(DENSE)
    for response in ({"meta_info": {"id": "x"}}, {"routed_experts": None}, {}):
        with error(r"^from_sglang: the response has no routed_experts: ask with "
                   r"return_routed_experts=True, on a server started with "
                   r"--enable-return-routed-experts$"):
            from_sglang(response, layout)


def test_sglang_arrays_of_a_wrong_shape_or_dtype(rng):
    layout = layout_of(DENSE)
    with error(r"^from_sglang: routed_experts has shape \(3, 4, 2\), expected \[rows, 6 decoder "
               r"layers \(all of them, dense ones included\), 2 = top_k\]$"):
        from_sglang(np.zeros((3, 4, 2), np.int32), layout)
    with error(r"^from_sglang: routed_experts holds 13 ids, not a whole number of rows of 6 "):
        from_sglang(np.zeros(13, np.int32), layout)
    with error(r"^from_sglang: routed_experts has dtype float32, expected an integer dtype$"):
        from_sglang(np.zeros((1, 6, 2), np.float32), layout)
    with error(r"^from_sglang: routed_experts has 2 dimensions \(3, 12\), expected 1 or 3$"):
        from_sglang(np.zeros((3, 12), np.int32), layout)


def test_sglang_wrong_argument_types(rng):
    routes = make_routes(rng, DENSE)
    with pytest.raises(TypeError, match=r"^to_sglang: routes must be a moestat.RoutedExperts"):
        to_sglang([routes])
    with pytest.raises(TypeError, match=r"^from_sglang: layout must be a moestat.RouteLayout, "
                                        r"got dict$"):
        from_sglang(to_sglang(routes), DENSE)
    with pytest.raises(TypeError, match=r"^from_sglang: routed_experts must be an array"):
        from_sglang(b"AAAA", routes.layout)
    with pytest.raises(TypeError, match=r"^from_sglang: first_position must be an int, got "
                                        r"float$"):
        from_sglang(to_sglang(routes), routes.layout, 1.0)
    with error(r"^from_sglang: first_position must be >= 0, got -1$"):
        from_sglang(to_sglang(routes), routes.layout, -1)
    with error(r"^from_sglang: unrecorded must be one of 'error', 'invalid', got 'skip'$"):
        from_sglang(to_sglang(routes), routes.layout, unrecorded="skip")


def test_narrow_sglang_payload_of_many_experts_reads_when_the_ids_fit(rng):
    # SGLang main's encoder sends uint8 whenever the ids fit (it falls back to int32
    # otherwise), so uint8 with E > 256 is legal on the wire.
    layout = layout_of(WIDE)
    array = np.zeros((2, 4, 3), np.uint8)
    array[:, [1, 3]] = [10, 20, 255]
    meta = {"routed_experts": base64.b64encode(array.tobytes()).decode(),
            "routed_experts_dtype": "uint8"}
    back = from_sglang(meta, layout)
    assert back.ids.dtype == np.uint16 and (back.ids == [10, 20, 255]).all()


# ---------------------------------------------------------------------------------------------
# vLLM
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec, dtype", [(DENSE, np.uint8), (ALL_MOE, np.uint8),
                                         (EDGE, np.uint8), (WIDE, np.uint16), (TOP1, np.uint8)])
def test_vllm_round_trip(rng, spec, dtype):
    routes = make_routes(rng, spec, num_tokens=6, first_position=2, request_id="v")
    array = to_vllm(routes)
    # vLLM 0.33: uint8 when E <= 256, else uint16; all decoder layers, dense ones 0.
    assert array.dtype == dtype and array.flags.c_contiguous
    np.testing.assert_array_equal(array, all_layers(routes, dtype))
    assert_same(from_vllm(array, routes.layout, 2, "v"), routes)
    encoded = to_vllm(routes, encoding="base64")
    # What a client of vLLM's HTTP API does with numpy2base64's output.
    decoded = np.load(io.BytesIO(base64.b64decode(encoded)), allow_pickle=False)
    assert decoded.dtype == dtype
    np.testing.assert_array_equal(decoded, array)
    assert encoded == b64_npy(array)
    assert_same(from_vllm(encoded, routes.layout, 2, "v"), routes)


def test_vllm_prompt_start_tail(rng):
    num_tokens, prompt_start = 9, 4
    full = make_routes(rng, DENSE, num_tokens=num_tokens - 1)
    tail = moestat.RoutedExperts(full.layout, full.ids[prompt_start:], request_id="req",
                                 first_position=prompt_start)
    np.testing.assert_array_equal(to_vllm(full)[prompt_start:], to_vllm(tail))
    back = from_vllm(to_vllm(tail), full.layout, prompt_start, "req", num_tokens=num_tokens)
    assert_same(back, tail)
    with error(r"^from_vllm: 4 rows, but a request of 9 tokens routed from position 3 has 5 "):
        from_vllm(to_vllm(tail), full.layout, prompt_start - 1, num_tokens=num_tokens)


def test_vllm_int32_arrays_read(rng):
    routes = make_routes(rng, WIDE)
    assert_same(from_vllm(all_layers(routes, np.int32), routes.layout, request_id="req"), routes)


def test_vllm_refuses_pickles(rng):
    layout = layout_of(DENSE)
    objects = np.empty((1, 6, 2), dtype=object)
    objects[...] = 1
    with error(r"^from_vllm: routed_experts is a \.npy of Python objects, which would need "
               r"unpickling: refused$"):
        from_vllm(b64_npy(objects, allow_pickle=True), layout)
    raw_pickle = base64.b64encode(pickle.dumps(np.zeros((1, 6, 2), np.uint8))).decode()
    with error(r"^from_vllm: routed_experts is not a \.npy array \(a pickle; vLLM sends "
               r"numpy2base64's \.npy\)$"):
        from_vllm(raw_pickle, layout)
    with error(r"^from_vllm: routed_experts has dtype object, expected uint8 or uint16 or "
               r"int32$"):
        from_vllm(objects, layout)


def test_vllm_hostile_payloads(rng):
    routes = make_routes(rng, DENSE, num_tokens=4)
    layout = routes.layout
    npy = base64.b64decode(to_vllm(routes, encoding="base64"))
    truncated = base64.b64encode(npy[:-5]).decode()
    with error(r"^from_vllm: routed_experts' \.npy header declares uint8 \[4, 6, 2\] \(48 "
               r"bytes\), but 43 bytes follow it$"):
        from_vllm(truncated, layout)
    with error(r"^from_vllm: routed_experts is not a readable \.npy array \("):
        from_vllm(base64.b64encode(npy[:12]).decode(), layout)
    with error(r"^from_vllm: routed_experts is not valid base64 \("):
        from_vllm(to_vllm(routes, encoding="base64")[:-1], layout)
    with error(r"^from_vllm: routed_experts is not a \.npy array \(no \.npy header; "):
        from_vllm(base64.b64encode(b"not an npy file").decode(), layout)
    archive = io.BytesIO()
    np.savez(archive, a=to_vllm(routes))
    with error(r"^from_vllm: routed_experts is not a \.npy array \(an \.npz archive; "):
        from_vllm(base64.b64encode(archive.getvalue()).decode(), layout)
    for dtype in (np.int64, np.int16, np.float32, np.bool_):
        with error(rf"^from_vllm: routed_experts has dtype {np.dtype(dtype).name}, expected "
                   rf"uint8 or uint16 or int32$"):
            from_vllm(b64_npy(to_vllm(routes).astype(dtype)), layout)
    with error(r"^from_vllm: routed_experts has 2 dimensions \(4, 12\), expected 3$"):
        from_vllm(to_vllm(routes).reshape(4, 12), layout)
    with error(r"^from_vllm: routed_experts has shape \(4, 4, 2\), expected \[rows, 6 decoder "
               r"layers"):
        from_vllm(to_vllm(routes)[:, list(layout.layers)], layout)  # MoE-only (pre-0.33 vLLM)
    bad = to_vllm(routes)
    bad[3, 5, 0] = 9
    with error(r"^from_vllm: expert id 9 at position 3 layer 5 is outside \[0, 8\)$"):
        from_vllm(b64_npy(bad), layout)


def test_vllm_dtype_limits(rng):
    # uint8 cannot carry ids of 300 experts: the array was truncated or the layout is wrong.
    wide = make_routes(rng, WIDE)
    with error(r"^from_vllm: uint8 holds expert ids up to 255, the layout has 300 experts: the "
               r"engine's ids were truncated, or the layout is not the engine's$"):
        from_vllm(to_vllm(wide).astype(np.uint8), wide.layout)
    huge = moestat.RoutedExperts(moestat.RouteLayout(2, [1], 70000, 2),
                                 np.array([[[69999, 1]]]))
    with error(r"^to_vllm: vLLM sends uint8 or uint16 ids, which hold 65536 experts; the layout "
               r"has 70000$"):
        to_vllm(huge)


def test_vllm_invalid_rows_and_arguments(rng):
    routes = make_routes(rng, DENSE, num_tokens=3, first_position=7, request_id="",
                         invalid=[(1, 3)])
    with error(r"^to_vllm: the request has 1 unrecorded \(not valid\) layer rows, the first at "
               r"position 8 layer 5; vLLM's format cannot mark"):
        to_vllm(routes)
    array = to_vllm(routes, allow_invalid=True)
    assert (array[1, 5] == 0).all()
    assert_same(from_vllm(array, routes.layout, 7, unrecorded="invalid"), routes)
    with error(r"^to_vllm: encoding must be one of 'array', 'base64', got 'npy'$"):
        to_vllm(routes, encoding="npy")


# ---------------------------------------------------------------------------------------------
# Megatron-Core RouterReplay
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [DENSE, WIDE, TOP1])
def test_megatron_round_trip(rng, spec):
    batch = [make_routes(rng, spec, num_tokens=n, first_position=p, request_id=f"m{i}")
             for i, (n, p) in enumerate([(4, 0), (0, 3), (7, 11)])]
    per_layer = to_megatron(batch)
    assert len(per_layer) == len(spec["layers"])
    for c, array in enumerate(per_layer):
        assert array.dtype == np.int64 and array.flags.c_contiguous
        assert array.shape == (11, spec["top_k"])
        np.testing.assert_array_equal(array, np.concatenate([r.ids[:, c] for r in batch]))
    back = from_megatron(per_layer, batch[0].layout, [4, 0, 7], request_ids=["m0", "m1", "m2"],
                         first_positions=[0, 3, 11])
    assert len(back) == 3
    for got, want in zip(back, batch):
        assert_same(got, want)
    # One stacked [num_moe_layers, tokens, K] array, and a single request.
    stacked = np.stack(per_layer).astype(np.int32)
    assert len(from_megatron(stacked, batch[0].layout, [4, 0, 7])) == 3
    single = from_megatron(to_megatron(batch[2]), batch[2].layout, first_positions=[11],
                           request_ids=["m2"])
    assert len(single) == 1
    assert_same(single[0], batch[2])


def test_megatron_refuses(rng):
    batch = [make_routes(rng, DENSE, num_tokens=3), make_routes(rng, DENSE, num_tokens=2)]
    layout = batch[0].layout
    per_layer = to_megatron(batch)
    with error(r"^from_megatron: 3 layers of indices, the layout has 4 MoE layers \(one per "
               r"RouterReplay instance\)$"):
        from_megatron(per_layer[:3], layout)
    with error(r"^from_megatron: lengths add up to 4 tokens, the indices have 5$"):
        from_megatron(per_layer, layout, [2, 2])
    with error(r"^from_megatron: per_layer\[2\] has shape \(4, 2\), per_layer\[0\] has \(5, 2\)$"):
        from_megatron([a if i != 2 else a[:4] for i, a in enumerate(per_layer)], layout)
    with error(r"^from_megatron: indices have 3 ids per token, the layout's top_k is 2$"):
        from_megatron([np.zeros((5, 3), np.int64)] * 4, layout)
    with error(r"^from_megatron: per_layer\[1\] has dtype float64, expected an integer dtype$"):
        from_megatron([a.astype(float) if i == 1 else a for i, a in enumerate(per_layer)], layout)
    with error(r"^from_megatron: 1 request_ids for 2 requests$"):
        from_megatron(per_layer, layout, [3, 2], request_ids=["a"])
    bad = [a.copy() for a in per_layer]
    bad[1][3] = [1, -1]
    with error(r"^from_megatron: expert id -1 at position 0 layer 2 is outside \[0, 8\) "
               r"\(request 1: rows \[3, 5\) of the indices\)$"):
        from_megatron(bad, layout, [3, 2])
    other = make_routes(rng, ALL_MOE)
    with error(r"^to_megatron: routes\[1\] has layout \(3 decoder layers, MoE layers \[0, 1, 2\], "
               r"16 experts, top_k 4\), routes\[0\] has \(6 decoder layers"):
        to_megatron([batch[0], other])
    with error(r"^to_megatron: no routes given$"):
        to_megatron([])
    with pytest.raises(TypeError, match=r"^to_megatron: routes\[1\] must be a "
                                        r"moestat.RoutedExperts, got ndarray$"):
        to_megatron([batch[0], per_layer[0]])
    holes = make_routes(rng, DENSE, num_tokens=3, request_id="h", invalid=[(0, 0)])
    with error(r"^to_megatron: request 'h' has 1 unrecorded \(not valid\) layer rows, the first "
               r"at position 0 layer 1; Megatron's RouterReplay cannot mark"):
        to_megatron([batch[0], holes])
    written = to_megatron(holes, allow_invalid=True)
    assert (written[0][0] == 0).all()
    assert_same(from_megatron(written, layout, request_ids=["h"], unrecorded="invalid")[0], holes)


# ---------------------------------------------------------------------------------------------
# verl
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [DENSE, WIDE, EDGE])
@pytest.mark.parametrize("layers", ["moe", "all"])
def test_verl_round_trip(rng, spec, layers):
    batch = [make_routes(rng, spec, num_tokens=5, first_position=0, request_id="a"),
             make_routes(rng, spec, num_tokens=3, first_position=2, request_id="b",
                         invalid=[(1, c) for c in range(len(spec["layers"]))]),
             make_routes(rng, spec, num_tokens=0, first_position=0, request_id="c")]
    offsets = [1, 0, 4]  # left padding of the prompts
    ids, mask = to_verl(batch, seq_len=9, layers=layers, offsets=offsets)
    width = len(spec["layers"]) if layers == "moe" else spec["num_decoder_layers"]
    assert ids.dtype == np.int16 and ids.shape == (3, 9, width, spec["top_k"])
    assert mask.dtype == np.bool_ and mask.shape == (3, 9)
    np.testing.assert_array_equal(mask[0], [0, 1, 1, 1, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(mask[1], [0, 0, 1, 0, 1, 0, 0, 0, 0])  # row 1 unrecorded
    assert not mask[2].any() and not ids[2].any()
    columns = list(spec["layers"]) if layers == "all" else slice(None)
    np.testing.assert_array_equal(ids[0, 1:6][:, columns], batch[0].ids)
    if layers == "all":
        dense = [i for i in range(spec["num_decoder_layers"]) if i not in spec["layers"]]
        assert not ids[:, :, dense].any()
    back = from_verl(ids, mask, batch[0].layout, layers=layers, offsets=offsets,
                     request_ids=["a", "b", "c"])
    assert_same(back[0], batch[0])
    assert_same(back[1], batch[1])
    assert back[2].num_tokens == 0 and back[2].request_id == "c"
    # The layer axis told apart by its width, and the default seq_len.
    again = from_verl(ids, mask.astype(np.int64), batch[0].layout, offsets=offsets)
    assert_same(again[0], batch[0], request_id="")
    tight, tight_mask = to_verl(batch, layers=layers, offsets=offsets)
    assert tight.shape[1] == 6 and tight_mask.shape == (3, 6)


def test_verl_partially_recorded_tokens(rng):
    routes = make_routes(rng, DENSE, num_tokens=4, first_position=1, request_id="p",
                         invalid=[(2, 1)])
    with error(r"^to_verl: sample 0 \(request 'p'\) position 3 is recorded in some MoE layers but "
               r"not in layer 2; verl's mask is per token: pass allow_invalid=True to write such "
               r"tokens as 0 with mask False$"):
        to_verl(routes)
    ids, mask = to_verl(routes, allow_invalid=True)
    np.testing.assert_array_equal(mask[0], [0, 1, 1, 0, 1])
    assert not ids[0, 3].any()
    back = from_verl(ids, mask, routes.layout)[0]
    assert back.first_position == 1 and not back.valid[2].any() and back.valid.sum() == 12


def test_verl_refuses(rng):
    routes = make_routes(rng, DENSE, num_tokens=4)
    layout = routes.layout
    ids, mask = to_verl(routes, seq_len=6)
    shifted = np.roll(mask, 1, axis=1)
    with error(r"^from_verl: sample 0 index 0 holds expert ids but its mask is False: ids and "
               r"mask are misaligned$"):
        from_verl(ids, shifted, layout)
    with error(r"^from_verl: mask has shape \(1, 5\), routed_experts \(1, 6\) rows$"):
        from_verl(ids, mask[:, :5], layout)
    with error(r"^from_verl: mask has dtype float32, expected bool \(or 0/1 integers\)$"):
        from_verl(ids, mask.astype(np.float32), layout)
    with error(r"^from_verl: mask has dtype int64, expected bool"):
        from_verl(ids, mask.astype(np.int64) * 2, layout)
    with error(r"^from_verl: routed_experts has shape \(1, 6, 3, 2\), expected \[bs, seq, 4 MoE "
               r"layers or 6 decoder layers, 2 = top_k\]$"):
        from_verl(ids[:, :, :3], mask, layout)
    with error(r"^from_verl: routed_experts has shape \(1, 6, 4, 2\), expected \[bs, seq, 6 "
               r"decoder layers \(all of them\), 2 = top_k\]$"):
        from_verl(ids, mask, layout, layers="all")
    with error(r"^from_verl: routed_experts has 3 dimensions"):
        from_verl(ids[0], mask, layout)
    bad = ids.copy()
    bad[0, 2, 1] = [7, 7]
    with error(r"^from_verl: position 2 layer 2 repeats an expert: ids \[7, 7\] \(sample 0\)$"):
        from_verl(bad, mask, layout)
    with error(r"^from_verl: sample 0 has a route at index 0, before its position 0 at offset "
               r"1$"):
        from_verl(ids, mask, layout, offsets=[1])
    with error(r"^to_verl: seq_len 3 is too short: sample 0 has rows up to index 3$"):
        to_verl(routes, seq_len=3)
    with error(r"^to_verl: layers must be one of 'moe', 'all', got 'dense'$"):
        to_verl(routes, layers="dense")


def test_verl_int16_limit():
    # int16 holds ids up to 32767: 32768 experts fit, 32769 do not.
    fits = moestat.RoutedExperts(moestat.RouteLayout(1, [0], 32768, 2),
                                 np.array([[[32767, 0]]]))
    ids, mask = to_verl(fits)
    assert ids[0, 0, 0].tolist() == [32767, 0]
    assert_same(from_verl(ids, mask, fits.layout)[0], fits)
    over = moestat.RoutedExperts(moestat.RouteLayout(1, [0], 32769, 2), np.array([[[1, 0]]]))
    with error(r"^to_verl: verl's routed_experts are int16, which hold expert ids up to 32767; "
               r"the layout has 32769 experts$"):
        to_verl(over)


# ---------------------------------------------------------------------------------------------
# slime
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [DENSE, ALL_MOE, WIDE])
def test_slime_round_trip(rng, spec):
    num_tokens = 8  # len(tokens): slime expects len(tokens) - 1 rows
    routes = make_routes(rng, spec, num_tokens=num_tokens - 1, request_id="s")
    array = to_slime(routes)
    assert array.dtype == np.int32
    np.testing.assert_array_equal(array, all_layers(routes, np.int32))
    assert_same(from_slime(array, routes.layout, "s", num_tokens=num_tokens), routes)
    # slime reads SGLang's int32 wire: the same bytes.
    assert base64.b64encode(array.tobytes()).decode() == to_sglang(routes)["routed_experts"]


def test_slime_refuses(rng):
    later = make_routes(rng, DENSE, num_tokens=3, first_position=2, request_id="x")
    with error(r"^to_slime: request 'x' starts at position 2; slime's routes cover the whole "
               r"sequence from position 0 \(len\(tokens\) - 1 rows\)$"):
        to_slime(later)
    routes = make_routes(rng, DENSE, num_tokens=3)
    array = to_slime(routes)
    with error(r"^from_slime: 3 rows, but a request of 3 tokens routed from position 0 has 2 "):
        from_slime(array, routes.layout, num_tokens=3)
    with error(r"^from_slime: routed_experts has dtype int64, expected int32$"):
        from_slime(array.astype(np.int64), routes.layout)
    with error(r"^from_slime: routed_experts has shape \(3, 4, 2\), expected \[rows, 6 decoder "):
        from_slime(array[:, list(routes.layout.layers)], routes.layout)
    zero_layer = array.copy()
    zero_layer[:, 4] = 0  # a MoE layer never aggregated (PP stage missing)
    with error(r"^from_slime: position 0 layer 4 has ids \[0, 0\]: a row the engine did not "
               r"record \(3 such layer rows\)"):
        from_slime(zero_layer, routes.layout)
    holes = make_routes(rng, DENSE, num_tokens=2, invalid=[(1, 2)])
    with error(r"^to_slime: request 'req' has 1 unrecorded"):
        to_slime(holes)
    assert_same(from_slime(to_slime(holes, allow_invalid=True), holes.layout, "req",
                           unrecorded="invalid"), holes)


# ---------------------------------------------------------------------------------------------
# What every from_* shares
# ---------------------------------------------------------------------------------------------


def test_model_and_placement_version_are_given_not_read(rng):
    # No upstream format carries them: the caller names them.
    routes = make_routes(rng, DENSE, num_tokens=2)
    layout = routes.layout
    made = [from_sglang(to_sglang(routes), layout, model="m", placement_version=3),
            from_vllm(to_vllm(routes), layout, model="m", placement_version=3),
            from_megatron(to_megatron(routes), layout, model="m", placement_version=3)[0],
            from_verl(*to_verl(routes), layout, model="m", placement_version=3)[0],
            from_slime(to_slime(routes), layout, model="m", placement_version=3)]
    for got in made:
        assert got.model == "m" and got.placement_version == 3
        np.testing.assert_array_equal(got.ids, routes.ids)
    with pytest.raises(TypeError, match=r"^from_vllm: model must be a str, got int$"):
        from_vllm(to_vllm(routes), layout, model=1)
    with error(r"^from_slime: placement_version must be >= 0, got -1$"):
        from_slime(to_slime(routes), layout, placement_version=-1)
