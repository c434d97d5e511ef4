"""moestat.routing's SGLang converters against SGLang 0.5.23's own code: our ``to_sglang``
payload decoded by SGLang's ``extract_routed_experts_from_meta_info``
(``sglang/srt/state_capturer/routed_experts.py``), and SGLang's encoder
(``DetokenizerManager._b64_encode_per_request``, ``sglang/srt/managers/detokenizer_manager.py``)
read back by our ``from_sglang``.

Neither module imports on its own (the whole server): sglang_state_capturer.py loads the real
files (from MOESTAT_SGLANG_WHEEL where set) and says how. Here each server module that
routed_experts.py imports is a stand-in holding only the names it imports, none of them called
by the decoder: ``ModelConfig``, the DP-attention helpers, ``get_moe_a2a_backend``,
``ForwardBatch``, the ``runtime_context`` getters, ``BaseTopkCapturer``. The decoder and the
encoder use the same ``pybase64`` (the standard library's base64 stands in where it is not
installed).
"""
from __future__ import annotations

import numpy as np
import pytest

from sglang_state_capturer import (PINNED, ROUTED_EXPERTS, b64_encode_per_request, bare_package,
                                   load, pybase64_module, sglang_file, stand_in_module)

torch = pytest.importorskip("torch")

import moestat  # noqa: E402
from moestat.routing import from_sglang, to_sglang  # noqa: E402


def _not_here(name: str):
    def stand_in(*args, **kwargs):
        raise AssertionError(f"{name} is a stand-in: the decoder must not call it")

    return stand_in


@pytest.fixture(scope="module")
def sglang(tmp_path_factory):
    """SGLang's (routed_experts module, _b64_encode_per_request, version)."""
    tmp = tmp_path_factory.mktemp("sglang")
    path, version = sglang_file(ROUTED_EXPERTS, tmp)
    pybase64 = pybase64_module()
    stand_ins = {
        "pybase64": pybase64,
        "sglang": bare_package("sglang"),
        "sglang.srt": bare_package("sglang.srt"),
        "sglang.srt.configs": bare_package("sglang.srt.configs"),
        "sglang.srt.configs.model_config": stand_in_module(
            "sglang.srt.configs.model_config", ModelConfig=type("ModelConfig", (), {})),
        "sglang.srt.layers": bare_package("sglang.srt.layers"),
        "sglang.srt.layers.dp_attention": stand_in_module(
            "sglang.srt.layers.dp_attention",
            attn_tp_all_gather_into_tensor=_not_here("attn_tp_all_gather_into_tensor"),
            get_dp_local_slice_cpu=_not_here("get_dp_local_slice_cpu"),
            is_dp_attention_enabled=_not_here("is_dp_attention_enabled")),
        "sglang.srt.layers.moe": stand_in_module(
            "sglang.srt.layers.moe", get_moe_a2a_backend=_not_here("get_moe_a2a_backend")),
        "sglang.srt.model_executor": bare_package("sglang.srt.model_executor"),
        "sglang.srt.model_executor.forward_batch_info": stand_in_module(
            "sglang.srt.model_executor.forward_batch_info",
            ForwardBatch=type("ForwardBatch", (), {})),
        "sglang.srt.runtime_context": stand_in_module(
            "sglang.srt.runtime_context",
            **{n: _not_here(n) for n in ("get_exec", "get_parallel", "get_resources",
                                         "get_schedule")}),
        "sglang.srt.state_capturer": bare_package("sglang.srt.state_capturer"),
        "sglang.srt.state_capturer.base": stand_in_module(
            "sglang.srt.state_capturer.base", BaseTopkCapturer=type("BaseTopkCapturer", (), {})),
    }
    module = load("sglang.srt.state_capturer.routed_experts", path, stand_ins)

    # DetokenizerManager._b64_encode_per_request, compiled from the real source.
    encode, decorators = b64_encode_per_request(tmp, pybase64)
    assert decorators == ["staticmethod"]
    return module, encode, version


def test_the_pinned_sglang_is_read(sglang):
    module, _, version = sglang
    assert version == PINNED, f"tests/engines/requirements-no-deps.txt pins sglang {PINNED}"
    assert callable(module.extract_routed_experts_from_meta_info)


def _routes(rng, layout, num_tokens, first_position=0, request_id="r"):
    C, K, E = layout.num_columns, layout.top_k, layout.num_experts
    ids = np.argsort(rng.random((num_tokens, C, E)), axis=2)[:, :, :K]
    return moestat.RoutedExperts(layout, ids, request_id=request_id,
                                 first_position=first_position)


def _expected(routes):
    layout = routes.layout
    full = np.zeros((routes.num_tokens, layout.num_decoder_layers, layout.top_k), np.int32)
    full[:, list(layout.layers), :] = routes.ids
    return full


# Qwen3-30B-A3B's shape (48 layers, all MoE, 128 experts, top-8: SGLang's own test reshapes with
# (-1, 48, 8)), and a DeepSeek-style model with dense leading layers.
LAYOUTS = [dict(num_decoder_layers=48, layers=list(range(48)), num_experts=128, top_k=8),
           dict(num_decoder_layers=7, layers=[3, 4, 5, 6], num_experts=300, top_k=6)]


@pytest.mark.parametrize("spec", LAYOUTS)
def test_sglang_decodes_to_sglang(sglang, spec):
    module, _, _ = sglang
    rng = np.random.default_rng(3)
    layout = moestat.RouteLayout(spec["num_decoder_layers"], spec["layers"],
                                 spec["num_experts"], spec["top_k"])
    routes = _routes(rng, layout, num_tokens=37)
    response = {"text": "...", "meta_info": to_sglang(routes)}
    flat = module.extract_routed_experts_from_meta_info(response)
    assert flat.dtype == np.int32 and flat.ndim == 1
    decoded = flat.reshape(-1, spec["num_decoder_layers"], spec["top_k"])
    np.testing.assert_array_equal(decoded, _expected(routes))
    # And what SGLang's decoder returns (the flat int32 array) reads back.
    back = from_sglang(flat, layout, request_id="r")
    np.testing.assert_array_equal(back.ids, routes.ids)
    assert back.complete


def test_sglang_start_len_matches_the_tail(sglang):
    # SGLang's own test: with routed_experts_start_len N, rows == seqlen - 1 - N and equal the
    # tail of the full response.
    module, _, _ = sglang
    rng = np.random.default_rng(4)
    spec = LAYOUTS[1]
    layout = moestat.RouteLayout(spec["num_decoder_layers"], spec["layers"],
                                 spec["num_experts"], spec["top_k"])
    seqlen, start_len = 20, 6
    full = _routes(rng, layout, seqlen - 1)
    tail = moestat.RoutedExperts(layout, full.ids[start_len:], request_id="r",
                                 first_position=start_len)
    shape = (-1, spec["num_decoder_layers"], spec["top_k"])
    full_rows = module.extract_routed_experts_from_meta_info(
        {"meta_info": to_sglang(full)}).reshape(shape)
    tail_rows = module.extract_routed_experts_from_meta_info(
        {"meta_info": to_sglang(tail)}).reshape(shape)
    assert tail_rows.shape[0] == seqlen - 1 - start_len
    np.testing.assert_array_equal(tail_rows, full_rows[start_len:])


def test_sglang_0_5_23_decodes_int32_only(sglang):
    # 0.5.23's decoder ignores routed_experts_dtype: a narrow payload (SGLang main's uint8) is
    # not what it returns. moestat writes int32 unless asked, for that reason.
    module, _, _ = sglang
    layout = moestat.RouteLayout(2, [1], 8, 4)
    routes = moestat.RoutedExperts(layout, np.array([[[1, 2, 3, 4]]] * 4))
    flat = module.extract_routed_experts_from_meta_info({"meta_info": to_sglang(routes, "uint8")})
    assert flat.size == 4 * 2 * 4 // 4  # 32 bytes of uint8 read as 8 int32


def test_from_sglang_reads_sglangs_encoder(sglang):
    # What the detokenizer puts in meta_info["routed_experts"]: its host cache rows, a torch
    # int32 tensor [seqlen - 1 - start_len, L, K] per request, dense layers 0.
    _, encode, _ = sglang
    rng = np.random.default_rng(5)
    spec = LAYOUTS[1]
    layout = moestat.RouteLayout(spec["num_decoder_layers"], spec["layers"],
                                 spec["num_experts"], spec["top_k"])
    first, second = _routes(rng, layout, 11, 0, "a"), _routes(rng, layout, 3, 8, "b")
    tensors = [torch.from_numpy(_expected(first)), None, torch.from_numpy(_expected(second))]
    encoded = encode(tensors)
    assert encoded[1] is None
    assert encoded[0] == to_sglang(first)["routed_experts"]
    back = from_sglang({"meta_info": {"routed_experts": encoded[2]}}, layout, 8, "b",
                       num_tokens=12)
    np.testing.assert_array_equal(back.ids, second.ids)
    assert back.first_position == 8 and back.request_id == "b" and back.complete
