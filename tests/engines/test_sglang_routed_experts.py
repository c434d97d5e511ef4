"""moestat.sglang.routed_experts against SGLang 0.5.23's own routed-experts capturer.

SGLang's ``sglang/srt/state_capturer/base.py`` (``BaseDeviceCache``, ``BaseHostCache``,
``BaseTopkCapturer``, ``TopkCaptureOutput``) and ``routed_experts.py`` (``RoutedExpertsCapturer``:
its ``create``, the fused shared-expert padding, the DP-attention slice) are loaded from the
real files under their real names by sglang_state_capturer.py (see its docstring), as for
test_sglang_routes_wire.py: the sglang packages they live in are made bare and each server
module they import is a stand-in holding only the names they import:

- ``mem_cache.pool_host.common``: ``ALLOC_MEMORY_FUNCS[device]`` allocates the host cache as a
  plain CPU tensor (pinned where CUDA is there), ``HostTensorAllocator`` and
  ``_cuda_host_unregister`` do nothing; ``mem_cache.memory_pool.ReqToTokenPool``,
  ``forward_batch_info.ForwardBatch`` and ``configs.model_config.ModelConfig`` are bare types
  (only annotations); ``utils.is_cuda``/``is_hip`` answer False (read by ``destroy`` only).
- ``runtime_context`` (``get_exec``, ``get_schedule``, ``get_parallel``, ``get_resources``),
  ``layers.dp_attention`` and ``layers.moe.get_moe_a2a_backend`` answer from ``SETTINGS``
  below: routed experts on, chunked prefill 16, one DP rank, no DP attention, no DeepEP.

Both capturers are made by their ``create`` from the same model and settings and driven with
the same simulated forward batches (the engine below plays SGLang's scheduler: KV slots from a
free list, ``req_to_token`` rows, forward batches with ``out_cache_loc``, the overlap
scheduler's deferred ``finalize``); every ``get_topk`` must give equal tensors (dtype, shape,
values), the detokenizer's base64 of them the same string, and SGLang's own
``extract_routed_experts_from_meta_info`` must decode ours to SGLang's array. Where moestat
deliberately differs (a layer routed twice in one forward, invalid ids, faults), the
difference is asserted.

``pybase64`` is not in .venv-engines: where it is missing, the standard library's base64
stands in (pybase64 documents itself a drop-in for it). MOESTAT_SGLANG_WHEEL (an sglang
wheel) is honoured, as in the harness (sglang_state_capturer.sglang_file).
"""
from __future__ import annotations

import gc
import importlib
import sys
import types

import numpy as np
import pytest

from sglang_state_capturer import (BASE, PINNED, ROUTED_EXPERTS, b64_encode_per_request,
                                   bare_package, load, pybase64_module, sglang_file,
                                   stand_in_module)

torch = pytest.importorskip("torch")

import moestat  # noqa: E402
from moestat.routing import from_sglang  # noqa: E402
from moestat.sglang import routed_experts as moestat_routed  # noqa: E402

# (moestat.sglang.install is also the name of the function moestat.sglang exports.)
moestat_install = importlib.import_module("moestat.sglang.install")

# A DeepSeek-like model: dense layers 0 and 3, MoE layers 1, 2, 4, 5; top-4 of 20 experts and
# one fused shared expert (id 20) whose column follows the routed ones.
NUM_LAYERS, MOE_LAYERS, NUM_EXPERTS, TOP_K, SHARED = 6, (1, 2, 4, 5), 20, 4, 1
NUM_TOKENS = 96  # the KV pool's slots (SGLang keeps slot 0 for padding)
MAX_RUNNING_REQUESTS = 8
CHUNKED_PREFILL = 16  # so both make 16 batch rows

SETTINGS = types.SimpleNamespace(
    enabled=True, chunked_prefill_size=CHUNKED_PREFILL, num_dp_ranks=1, attn_tp_size=1,
    dp_attention=False, dp_local_slice=None, resources=types.SimpleNamespace(
        experts_capturer=None))

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not (torch.cuda.is_available() and moestat.has_cuda), reason="needs CUDA"))]


# ---------------------------------------------------------------------------------------------
# SGLang's files
# ---------------------------------------------------------------------------------------------


def _host_alloc(shape, dtype, device, pin_memory, allocator):
    return torch.empty(shape, dtype=dtype, device=device,
                       pin_memory=pin_memory and torch.cuda.is_available())


class _A2ABackend:
    @staticmethod
    def is_deepep():
        return False

    @staticmethod
    def is_deepep_v2():
        return False


def _runtime_context() -> types.ModuleType:
    return stand_in_module(
        "sglang.srt.runtime_context",
        get_exec=lambda: types.SimpleNamespace(features=types.SimpleNamespace(
            enable_return_routed_experts=SETTINGS.enabled)),
        get_schedule=lambda: types.SimpleNamespace(
            chunked_prefill_size=SETTINGS.chunked_prefill_size),
        get_parallel=lambda: types.SimpleNamespace(num_dp_ranks=SETTINGS.num_dp_ranks,
                                                   attn_tp_size=SETTINGS.attn_tp_size),
        get_resources=lambda: SETTINGS.resources)


def _stand_ins() -> dict:
    bare = type("Bare", (), {})
    packages = ("sglang", "sglang.srt", "sglang.srt.mem_cache", "sglang.srt.mem_cache.pool_host",
                "sglang.srt.model_executor", "sglang.srt.configs", "sglang.srt.layers",
                "sglang.srt.state_capturer")
    return {
        **{name: bare_package(name) for name in packages},
        "pybase64": pybase64_module(),
        "sglang.srt.mem_cache.memory_pool": stand_in_module(
            "sglang.srt.mem_cache.memory_pool", ReqToTokenPool=bare),
        "sglang.srt.mem_cache.pool_host.common": stand_in_module(
            "sglang.srt.mem_cache.pool_host.common",
            ALLOC_MEMORY_FUNCS={"cpu": _host_alloc, "cuda": _host_alloc, "meta": _host_alloc},
            HostTensorAllocator=bare, _cuda_host_unregister=lambda tensor: None),
        "sglang.srt.model_executor.forward_batch_info": stand_in_module(
            "sglang.srt.model_executor.forward_batch_info", ForwardBatch=bare),
        "sglang.srt.utils": stand_in_module("sglang.srt.utils", is_cuda=lambda: False,
                                            is_hip=lambda: False),
        "sglang.srt.configs.model_config": stand_in_module(
            "sglang.srt.configs.model_config", ModelConfig=bare),
        "sglang.srt.layers.dp_attention": stand_in_module(
            "sglang.srt.layers.dp_attention",
            is_dp_attention_enabled=lambda: SETTINGS.dp_attention,
            get_dp_local_slice_cpu=lambda *args: SETTINGS.dp_local_slice(*args),
            attn_tp_all_gather_into_tensor=None),
        "sglang.srt.layers.moe": stand_in_module("sglang.srt.layers.moe",
                                                 get_moe_a2a_backend=lambda: _A2ABackend()),
        "sglang.srt.runtime_context": _runtime_context(),
    }


@pytest.fixture(scope="module")
def sglang(tmp_path_factory):
    """SGLang's (routed_experts module, base module, _b64_encode_per_request, version)."""
    tmp = tmp_path_factory.mktemp("sglang")
    stand_ins = _stand_ins()
    base_path, version = sglang_file(BASE, tmp)
    base_module = load("sglang.srt.state_capturer.base", base_path, stand_ins)
    path, _ = sglang_file(ROUTED_EXPERTS, tmp)
    module = load("sglang.srt.state_capturer.routed_experts", path,
                  {**stand_ins, "sglang.srt.state_capturer.base": base_module})

    # DetokenizerManager._b64_encode_per_request, compiled from the real source.
    encode, _ = b64_encode_per_request(tmp, pybase64_module())
    return types.SimpleNamespace(module=module, base=base_module, encode=encode,
                                 version=version)


@pytest.fixture(autouse=True)
def _settings():
    SETTINGS.enabled, SETTINGS.dp_attention, SETTINGS.dp_local_slice = True, False, None
    SETTINGS.resources.experts_capturer = None
    yield


def test_the_pinned_sglang_is_read(sglang):
    assert sglang.version == PINNED, f"tests/engines/requirements-no-deps.txt pins {PINNED}"
    assert issubclass(sglang.module.RoutedExpertsCapturer, sglang.base.BaseTopkCapturer)


# ---------------------------------------------------------------------------------------------
# The model and the engine
# ---------------------------------------------------------------------------------------------


class _TopK(torch.nn.Module):
    """What create() reads of SGLang's TopK: layer_id and topk_config."""

    def __init__(self, layer_id, allow=True):
        super().__init__()
        self.layer_id = layer_id
        self.topk_config = types.SimpleNamespace(allow_routed_experts_capture=allow)


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.routers = torch.nn.ModuleList([_TopK(layer) for layer in MOE_LAYERS])
        self.draft_router = _TopK(0, allow=False)  # a draft's router: opted out of capture
        self.shared_experts_config = types.SimpleNamespace(num_fused_shared_experts=SHARED)


def _model_config():
    text = types.SimpleNamespace(num_hidden_layers=NUM_LAYERS, num_experts_per_tok=TOP_K,
                                 n_routed_experts=NUM_EXPERTS)
    return types.SimpleNamespace(hf_text_config=text, hf_config=text)


def _capturers(sglang, device, **options):
    arguments = dict(model=_Model(), model_config=_model_config(), num_tokens=NUM_TOKENS,
                     max_running_requests=MAX_RUNNING_REQUESTS, device=device)
    theirs = sglang.module.RoutedExpertsCapturer.create(**arguments)
    ours = moestat_routed.RoutedExpertsCapturer.create(
        **arguments, max_batch_size=CHUNKED_PREFILL, **options)
    assert theirs.device_cache.buffer.shape == (CHUNKED_PREFILL, NUM_LAYERS, TOP_K + SHARED)
    assert ours.max_batch_size == CHUNKED_PREFILL
    assert tuple(ours.layout.layers) == MOE_LAYERS  # found in the model's TopK modules
    return theirs, ours


class Engine:
    """Plays SGLang's scheduler and model runner around the capturers.

    KV slots come from a free list (slot 0 is SGLang's padding slot, never handed out);
    ``req_to_token`` rows are written as tokens get slots; each forward routes its batch rows
    (random top-k ids, padding rows included) through every MoE layer's ``capture``, then
    ``on_forward_end``. With ``overlap`` (SGLang's default scheduler) each forward's output is
    copied (``map_device_tensors``) and finalized after the next forward has run, as
    ``event_loop_overlap`` does. ``slots`` records what SGLang's host cache should hold."""

    def __init__(self, capturers, device, overlap, seed=0):
        self.capturers = capturers
        self.device = device
        self.overlap = overlap
        self.rng = np.random.default_rng(seed)
        self.req_to_token = torch.zeros((MAX_RUNNING_REQUESTS, 64), dtype=torch.int32,
                                        device=device)
        self.pool = types.SimpleNamespace(req_to_token=self.req_to_token)
        self.free = list(range(1, NUM_TOKENS))
        self.pending = []  # (outputs, slots, routing) of forwards not finalized yet
        self.slots = {}  # KV slot -> its routing [MoE layers, K], once committed

    def alloc(self, count):
        taken, self.free = self.free[:count], self.free[count:]
        assert len(taken) == count, "the test's KV pool is too small"
        return taken

    def release(self, slots):
        self.free = list(slots) + self.free  # handed out again first

    def routing(self, rows):
        order = np.argsort(self.rng.random((rows, len(MOE_LAYERS), NUM_EXPERTS)), axis=2)
        return order[:, :, :TOP_K].astype(np.int32)

    def forward(self, spans, *, pad_to=None, shared_columns=False, virtual=False, graph=False,
                extra=None):
        """spans: (req_pool_idx, first_position, slots); one batch row per token in order.
        extra(layer, ids): called after each layer's captures (a draft router, ...)."""
        slots = []
        for request, first, request_slots in spans:
            self.req_to_token[request, first:first + len(request_slots)] = torch.tensor(
                request_slots, dtype=torch.int32)
            slots += request_slots
        rows = pad_to or len(slots)
        routing = self.routing(rows)
        for column, layer in enumerate(MOE_LAYERS):
            ids = torch.from_numpy(routing[:, column, :].copy()).to(self.device)
            if shared_columns:  # the router wrote the shared expert's column itself
                ids = torch.cat([ids, torch.full((rows, SHARED), NUM_EXPERTS, dtype=torch.int32,
                                                 device=self.device)], dim=1)
            for capturer in self.capturers:
                capturer.capture(layer, ids)
            if extra is not None:
                extra(layer, ids)
        locs = torch.tensor(slots, dtype=torch.int64, device=self.device)
        batch = types.SimpleNamespace(out_cache_loc=locs, out_cache_loc_virtual=None)
        if virtual:  # attention rebound the write locations; the kernel batch is padded
            batch.out_cache_loc = torch.arange(1000, 1000 + rows, device=self.device)
            batch.out_cache_loc_virtual = locs
        outputs = [capturer.on_forward_end(batch, graph, rows if graph else None,
                                           no_copy_to_cpu=self.overlap)
                   for capturer in self.capturers]
        if self.overlap:
            assert all(output is not None for output in outputs)
            self.pending.append((outputs, slots, routing))
            if len(self.pending) > 1:  # the previous forward's results, processed now
                self.finalize_one()
        else:
            assert outputs == [None] * len(self.capturers)
            self.commit(slots, routing)
        return routing

    def finalize_one(self):
        outputs, slots, routing = self.pending.pop(0)
        for output in outputs:
            output.map_device_tensors(lambda tensor: tensor.to("cpu"))
            output.finalize()
        self.commit(slots, routing)

    def flush(self):
        while self.pending:
            self.finalize_one()

    def commit(self, slots, routing):
        for row, slot in enumerate(slots):
            self.slots[slot] = routing[row]

    def expected(self, request, seqlen, start_len=0):
        """What SGLang's host cache holds for the request (0 where a slot was never written)."""
        start_len = min(start_len, seqlen - 1)
        locs = self.req_to_token[request][start_len:seqlen - 1].cpu().tolist()
        out = np.zeros((len(locs), NUM_LAYERS, TOP_K), np.int32)
        for row, slot in enumerate(locs):
            if slot in self.slots:
                out[row, list(MOE_LAYERS)] = self.slots[slot]
        return torch.from_numpy(out)


def _same_topk(sglang, engine, request, seqlen, start_len=0):
    """Both capturers' get_topk, equal to each other and to what SGLang's cache should hold;
    the wire: the same base64, which SGLang's decoder reads back."""
    theirs, ours = (capturer.get_topk(request, seqlen, engine.pool, start_len)
                    for capturer in engine.capturers)
    assert ours.dtype == theirs.dtype == torch.int32
    assert ours.shape == theirs.shape == (max(0, seqlen - 1 - min(start_len, seqlen - 1)),
                                          NUM_LAYERS, TOP_K)
    assert torch.equal(theirs, engine.expected(request, seqlen, start_len))
    assert torch.equal(ours, theirs)
    wire_theirs, wire_ours = sglang.encode([theirs, ours])
    assert wire_ours == wire_theirs
    decoded = sglang.module.extract_routed_experts_from_meta_info(
        {"meta_info": {"routed_experts": wire_ours}})
    np.testing.assert_array_equal(decoded.reshape(-1, NUM_LAYERS, TOP_K), theirs.numpy())
    # moestat's reader too (rows of slots never written are all-0: not valid)
    layout = engine.capturers[1].layout
    routes = from_sglang(wire_ours, layout, min(start_len, seqlen - 1), unrecorded="invalid")
    np.testing.assert_array_equal(routes.ids, ours[:, list(MOE_LAYERS)].numpy())
    return ours


# ---------------------------------------------------------------------------------------------
# The differential test
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlap"])
@pytest.mark.parametrize("device", DEVICES)
def test_get_topk_equals_sglangs(sglang, device, overlap):
    theirs, ours = _capturers(sglang, device)
    engine = Engine([theirs, ours], device, overlap)
    A, B, C, U = 0, 1, 2, 3  # req_pool_idx of the requests
    D = A  # a later request in A's req_to_token row

    # A warm-up forward SGLang runs outside its forward batches (CUDA-graph capture runs the
    # model eagerly first; no on_forward_end): its ids must not stand for the next forward's.
    for layer in MOE_LAYERS:
        warmup = torch.from_numpy(engine.routing(CHUNKED_PREFILL)[:, 0, :].copy())
        for capturer in engine.capturers:
            capturer.capture(layer, warmup.to(device))

    # Chunked prefill: A's 20-token prompt in two chunks, the second beside B's prompt.
    a_slots, b_slots = engine.alloc(20), engine.alloc(5)
    engine.forward([(A, 0, a_slots[:16])])
    engine.forward([(A, 16, a_slots[16:]), (B, 0, b_slots)])
    assert ours.tallies()["stray_passes"] == 1
    # Decode: padded CUDA-graph batches (topk rows beyond out_cache_loc), the router writing
    # the fused shared expert's column, attention with rebound (virtual) write locations.
    a_len, b_len = 20, 5
    for step in range(4):
        a_new, b_new = engine.alloc(1), engine.alloc(1)
        engine.forward([(A, a_len, a_new), (B, b_len, b_new)], pad_to=4, graph=True,
                       shared_columns=step == 1, virtual=step == 2)
        a_slots += a_new
        b_slots += b_new
        a_len, b_len = a_len + 1, b_len + 1
    # Before the last forward's results are processed its rows are in neither cache.
    _same_topk(sglang, engine, A, a_len + 1)
    engine.flush()
    # A finishes: seqlen = prompt + outputs; rows for [start_len, seqlen - 1).
    for start_len in (0, 7, 23, 100):
        _same_topk(sglang, engine, A, a_len + 1, start_len)
    _same_topk(sglang, engine, B, b_len + 1)

    # Prefix cache: C's first 12 tokens are A's (their KV slots), computed by A's forwards.
    c_slots = a_slots[:12] + engine.alloc(6)
    engine.req_to_token[C, :12] = torch.tensor(a_slots[:12], dtype=torch.int32)
    engine.forward([(C, 12, c_slots[12:])])
    c_new = engine.alloc(1)
    engine.forward([(C, 18, c_new), (B, b_len, engine.alloc(1))], pad_to=4, graph=True)
    engine.flush()
    c_topk = _same_topk(sglang, engine, C, 20)
    a_topk = _same_topk(sglang, engine, A, a_len + 1)
    assert torch.equal(c_topk[:12], a_topk[:12])

    # Slot reuse: A's slots past the cached prefix are evicted and go to D (in A's
    # req_to_token row); D's forwards overwrite them.
    engine.release(a_slots[12:])
    d_slots = engine.alloc(len(a_slots) - 12)
    engine.forward([(D, 0, d_slots[:8])])
    engine.forward([(D, 8, d_slots[8:12]), (C, 19, engine.alloc(1))])
    engine.flush()
    _same_topk(sglang, engine, D, 13)
    _same_topk(sglang, engine, C, 21)

    # Slots no forward wrote (a prefix loaded from elsewhere): 0s in both; moestat counts them.
    u_slots = engine.alloc(8)
    engine.req_to_token[U, :5] = torch.tensor(u_slots[:5], dtype=torch.int32)
    engine.forward([(U, 5, u_slots[5:])])
    engine.flush()
    before = ours.faults.get("unrecorded_tokens", 0)
    u_topk = _same_topk(sglang, engine, U, 9)
    assert not u_topk[:5].any() and u_topk[5:].any()
    assert ours.faults["unrecorded_tokens"] == before + 5

    tallies = ours.tallies()
    assert tallies["layers_written_twice"] == 0 and tallies["invalid_ids"] == 0
    assert tallies["tokens_without_room"] == 0
    assert set(ours.faults) == {"unrecorded_tokens"}


def test_dp_attention_records_this_ranks_rows(sglang):
    # The MoE layers route the tokens of every DP rank; this rank's are rows
    # [start, start + n) (SGLang's get_dp_local_slice_cpu).
    SETTINGS.dp_attention = True
    SETTINGS.dp_local_slice = lambda batch, can_run_graph, cuda_graph_batch: (3, 4)
    theirs, ours = _capturers(sglang, "cpu")
    ours._dp_local_slice = SETTINGS.dp_local_slice  # found in SGLang's module in a server
    engine = Engine([theirs, ours], "cpu", overlap=False)
    slots = engine.alloc(4)
    locs = torch.tensor(slots, dtype=torch.int64)
    engine.req_to_token[0, :4] = locs.to(torch.int32)
    routing = engine.routing(10)
    for column, layer in enumerate(MOE_LAYERS):
        for capturer in engine.capturers:
            capturer.capture(layer, torch.from_numpy(routing[:, column, :].copy()))
    batch = types.SimpleNamespace(out_cache_loc=locs, out_cache_loc_virtual=None)
    for capturer in engine.capturers:
        assert capturer.on_forward_end(batch, False, None) is None
    engine.commit(slots, routing[3:7])
    _same_topk(sglang, engine, 0, 5)


# ---------------------------------------------------------------------------------------------
# Where moestat differs, on purpose
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlap"])
@pytest.mark.parametrize("draft_layer", [MOE_LAYERS[0], MOE_LAYERS[2]])
def test_a_layer_routed_twice_in_a_forward_keeps_the_first_and_is_tallied(sglang, draft_layer,
                                                                           overlap):
    # A draft/MTP router that writes a target layer at the end of the target's forward (an
    # inlined capture that SGLang's draft opt-out does not reach; SGLang #26980 was one on
    # layer 0): SGLang returns the draft's ids for that layer.
    theirs, ours = _capturers(sglang, "cpu")
    engine = Engine([theirs, ours], "cpu", overlap=overlap)
    last = MOE_LAYERS[-1]
    draft = torch.from_numpy(engine.routing(3)[:, 0, :].copy())

    def draft_router(layer, ids):
        if layer == last:
            for capturer in engine.capturers:
                capturer.capture(draft_layer, draft)

    slots = engine.alloc(3)
    engine.forward([(0, 0, slots)], extra=draft_router)
    engine.forward([(1, 0, engine.alloc(2))])  # the next forward is not disturbed
    engine.flush()
    expected = engine.expected(0, 4)
    assert torch.equal(ours.get_topk(0, 4, engine.pool), expected)  # the target's ids
    sglang_topk = theirs.get_topk(0, 4, engine.pool)
    assert torch.equal(sglang_topk[:, draft_layer], draft)
    assert not torch.equal(sglang_topk, expected)
    _same_topk(sglang, engine, 1, 3)
    assert ours.tallies()["layers_written_twice"] == 3  # one per batch row
    assert ours.tallies()["stray_passes"] == 0
    assert ours.faults == {}


def test_invalid_ids_read_as_zeros_and_are_counted(sglang):
    theirs, ours = _capturers(sglang, "cpu")
    engine = Engine([theirs, ours], "cpu", overlap=False)
    slots = engine.alloc(2)
    engine.req_to_token[0, :2] = torch.tensor(slots, dtype=torch.int32)
    routing = engine.routing(2)
    routing[1, 0, 0] = -1  # not an expert
    routing[0, 2, 1] = routing[0, 2, 0]  # an expert twice
    for column, layer in enumerate(MOE_LAYERS):
        for capturer in engine.capturers:
            capturer.capture(layer, torch.from_numpy(routing[:, column, :].copy()))
    batch = types.SimpleNamespace(out_cache_loc=torch.tensor(slots), out_cache_loc_virtual=None)
    for capturer in engine.capturers:
        capturer.on_forward_end(batch, False, None)
    sglang_topk, topk = theirs.get_topk(0, 3, engine.pool), ours.get_topk(0, 3, engine.pool)
    assert sglang_topk[1, MOE_LAYERS[0], 0] == -1  # SGLang passes them on
    assert not topk[1, MOE_LAYERS[0]].any() and not topk[0, MOE_LAYERS[2]].any()
    sglang_topk[1, MOE_LAYERS[0]] = 0
    sglang_topk[0, MOE_LAYERS[2]] = 0
    assert torch.equal(topk, sglang_topk)  # the other rows are SGLang's
    assert ours.tallies()["invalid_ids"] == 2
    assert ours.faults == {"unrecorded_layer_rows": 2}


def test_a_layer_not_captured_reads_as_zeros_not_the_previous_forwards(sglang):
    theirs, ours = _capturers(sglang, "cpu")
    engine = Engine([theirs, ours], "cpu", overlap=False)
    engine.forward([(0, 0, engine.alloc(3))])
    skipped = MOE_LAYERS[2]
    slots = engine.alloc(3)
    engine.req_to_token[1, :3] = torch.tensor(slots, dtype=torch.int32)
    routing = engine.routing(3)
    for column, layer in enumerate(MOE_LAYERS):
        if layer != skipped:
            for capturer in engine.capturers:
                capturer.capture(layer, torch.from_numpy(routing[:, column, :].copy()))
    batch = types.SimpleNamespace(out_cache_loc=torch.tensor(slots), out_cache_loc_virtual=None)
    for capturer in engine.capturers:
        capturer.on_forward_end(batch, False, None)
    sglang_topk, topk = theirs.get_topk(1, 4, engine.pool), ours.get_topk(1, 4, engine.pool)
    first = theirs.get_topk(0, 4, engine.pool)
    assert torch.equal(sglang_topk[:, skipped], first[:, skipped])  # the previous forward's
    assert not topk[:, skipped].any()
    sglang_topk[:, skipped] = 0
    assert torch.equal(topk, sglang_topk)
    assert ours.faults == {"unrecorded_layer_rows": 3}


def test_faults_are_counted_never_raised(sglang, caplog):
    theirs, ours = _capturers(sglang, "cpu")
    wide = torch.zeros((2, TOP_K + SHARED + 1), dtype=torch.int32)
    with pytest.raises(ValueError, match="neither the device width"):
        theirs.capture(MOE_LAYERS[0], wide)
    ours.capture(MOE_LAYERS[0], wide)
    ours.capture(MOE_LAYERS[0], wide)
    ours.capture(0, torch.zeros((2, TOP_K), dtype=torch.int32))  # a dense layer
    ours.capture(NUM_LAYERS, torch.zeros((2, TOP_K), dtype=torch.int32))  # no layer
    with pytest.raises(IndexError):
        theirs.capture(NUM_LAYERS, torch.zeros((2, TOP_K), dtype=torch.int32))
    ours.capture(MOE_LAYERS[0], torch.zeros((CHUNKED_PREFILL + 1, TOP_K), dtype=torch.int32))
    assert ours.faults == {"capture_width": 2, "capture_layer_not_moe": 2, "capture": 1}
    # SGLang writes a dense layer's row, which get_topk then returns; moestat has none.
    theirs.capture(0, torch.ones((2, TOP_K), dtype=torch.int32))
    batch = types.SimpleNamespace(out_cache_loc=torch.tensor([1, 2]), out_cache_loc_virtual=None)
    assert theirs.on_forward_end(batch, False, None) is None
    pool = types.SimpleNamespace(req_to_token=torch.tensor([[1, 2, 3]], dtype=torch.int32))
    assert theirs.get_topk(0, 3, pool)[:, 0].all()
    # A forward wider than the batch rows: not recorded, its slots read as not recorded.
    wide_batch = types.SimpleNamespace(out_cache_loc=torch.arange(1, CHUNKED_PREFILL + 2),
                                       out_cache_loc_virtual=None)
    assert ours.on_forward_end(wide_batch, False, None) is None
    assert ours.faults["on_forward_end"] == 1 and _rows_in_use(ours) == 0

    assert sum("capture_width" in record.getMessage() for record in caplog.records) == 1

    pool = types.SimpleNamespace(req_to_token=torch.arange(1, 9, dtype=torch.int32)[None])
    with pytest.raises(ValueError, match="must be non-negative"):  # as SGLang
        ours.get_topk(0, 8, pool, start_len=-1)
    ours.destroy()
    ours.destroy()
    assert torch.equal(ours.get_topk(0, 8, pool), torch.zeros((7, NUM_LAYERS, TOP_K),
                                                               dtype=torch.int32))
    batch = types.SimpleNamespace(out_cache_loc=torch.tensor([1]), out_cache_loc_virtual=None)
    assert ours.on_forward_end(batch, False, None) is None
    assert ours.faults["get_topk"] == 1 and ours.faults["on_forward_end"] == 2


def _rows_in_use(capturer):
    """Store rows held by KV slots or by forwards waiting for finalize()."""
    tallies = capturer.tallies()
    return tallies["tokens_held"] + tallies["tokens_pending"]


def test_outputs_never_finalized_give_their_rows_back(sglang):
    _, ours = _capturers(sglang, "cpu", in_flight_passes=2)
    capacity = NUM_TOKENS + 2 * CHUNKED_PREFILL
    batch = types.SimpleNamespace(out_cache_loc=torch.arange(1, CHUNKED_PREFILL + 1),
                                  out_cache_loc_virtual=None)
    ids = torch.arange(TOP_K, dtype=torch.int32).repeat(CHUNKED_PREFILL, 1)

    def forward():
        for layer in MOE_LAYERS:
            ours.capture(layer, ids)
        return ours.on_forward_end(batch, False, None, no_copy_to_cpu=True)

    for _ in range(10):  # dropped by the engine: the rows come back
        forward()
        gc.collect()
    assert _rows_in_use(ours) == 0
    # Kept but not finalized, they run out; the tokens without a row are not recorded.
    outputs = [forward() for _ in range(capacity // CHUNKED_PREFILL + 1)]
    assert ours.tallies()["tokens_without_room"] == CHUNKED_PREFILL
    assert ours.faults == {"tokens_without_room": CHUNKED_PREFILL}
    for output in outputs:
        output.finalize()
        output.finalize()  # once
    # The last forward wrote the slots last, unrecorded: they read as not recorded, never
    # as the tokens an earlier forward put there.
    assert _rows_in_use(ours) == 0
    pool = types.SimpleNamespace(req_to_token=batch.out_cache_loc[None].to(torch.int32))
    assert not ours.get_topk(0, CHUNKED_PREFILL, pool).any()
    assert ours.faults["unrecorded_tokens"] == CHUNKED_PREFILL - 1
    outputs[0].finalize()  # finalize() commits once: the slots stay unrecorded
    assert not ours.get_topk(0, CHUNKED_PREFILL, pool).any()
    outputs = [forward(), forward()]
    outputs[1].finalize()
    outputs[0].finalize()  # SGLang finalizes in order; out of order, the later commit wins
    expected = torch.zeros((CHUNKED_PREFILL - 1, NUM_LAYERS, TOP_K), dtype=torch.int32)
    expected[:, list(MOE_LAYERS)] = ids[0]
    assert torch.equal(ours.get_topk(0, CHUNKED_PREFILL, pool), expected)
    assert _rows_in_use(ours) == CHUNKED_PREFILL


def test_narrow_storage():
    # DeepSeek-V3: 61 layers (3 dense), top-8 of 256; SGLang's host cache is int32 x 61 x 8.
    layout = moestat.RouteLayout(61, list(range(3, 61)), 256, 8)
    assert layout.id_dtype == np.uint8
    assert layout.bytes_per_token == 58 * 8 + 58 == 522  # against SGLang's 61 * 8 * 4 = 1952


# ---------------------------------------------------------------------------------------------
# The process's capturer, install()
# ---------------------------------------------------------------------------------------------


def test_global_capturer_without_and_with_sglang(sglang, monkeypatch):
    monkeypatch.delitem(sys.modules, "sglang.srt.runtime_context", raising=False)
    _, ours = _capturers(sglang, "cpu")
    assert moestat_routed.get_global_experts_capturer() is None
    moestat_routed.set_global_experts_capturer(ours)
    assert moestat_routed.get_global_experts_capturer() is ours
    moestat_routed.destroy_global_experts_capturer()
    assert moestat_routed.get_global_experts_capturer() is None
    assert ours.recorder is None  # destroyed

    # In SGLang's process the capturer lives where SGLang's own getters find it.
    monkeypatch.setitem(sys.modules, "sglang.srt.runtime_context", _runtime_context())
    _, ours = _capturers(sglang, "cpu")
    moestat_routed.set_global_experts_capturer(ours)
    assert sglang.module.get_global_experts_capturer() is ours
    sglang.module.destroy_global_experts_capturer()
    assert moestat_routed.get_global_experts_capturer() is None


def test_install_makes_sglangs_create_build_moestats(sglang, monkeypatch):
    monkeypatch.setitem(sys.modules, moestat_install.SGLANG_CAPTURER_MODULE, sglang.module)
    monkeypatch.setitem(sys.modules, "sglang.srt.runtime_context", _runtime_context())
    # (The recorder's module stays away: its install() is test_sglang_install.py's.)
    monkeypatch.delitem(sys.modules, moestat_install.SGLANG_RECORDER_MODULE, raising=False)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    cls = sglang.module.RoutedExpertsCapturer
    original = cls.__dict__["create"]
    try:
        moestat_install.install_on_import(routed_experts=True)
        moestat_install.install_routed_experts()  # idempotent
        arguments = dict(model=_Model(), model_config=_model_config(), num_tokens=NUM_TOKENS,
                         max_running_requests=MAX_RUNNING_REQUESTS)
        made = cls.create(**arguments, device="cpu")
        assert isinstance(made, moestat_routed.RoutedExpertsCapturer)
        assert made.max_batch_size == CHUNKED_PREFILL  # SGLang's settings, read where SGLang does
        # A device moestat does not record on keeps SGLang's capturer.
        assert type(cls.create(**arguments, device="meta")) is cls
        SETTINGS.enabled = False  # --enable-return-routed-experts off: no capturer, as SGLang
        assert cls.create(**arguments, device="cpu") is None
    finally:
        cls.create = original
        del cls._moestat_installed


def test_install_on_import_waits_for_sglangs_module(monkeypatch):
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.delitem(sys.modules, moestat_install.SGLANG_CAPTURER_MODULE, raising=False)
    monkeypatch.delitem(sys.modules, moestat_install.SGLANG_RECORDER_MODULE, raising=False)
    monkeypatch.delenv(moestat_install.ROUTED_EXPERTS_ENV, raising=False)
    moestat_install.install_on_import()
    names = [getattr(f, "name", None) for f in sys.meta_path]
    assert moestat_install.SGLANG_CAPTURER_MODULE not in names  # off unless asked
    monkeypatch.setenv(moestat_install.ROUTED_EXPERTS_ENV, "1")
    moestat_install.install_on_import()
    moestat_install.install_on_import()
    names = [getattr(f, "name", None) for f in sys.meta_path]
    assert names.count(moestat_install.SGLANG_CAPTURER_MODULE) == 1


# ---------------------------------------------------------------------------------------------
# CUDA graphs
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(not (torch.cuda.is_available() and moestat.has_cuda), reason="needs CUDA")
def test_captured_graph_replays_record_like_sglangs(sglang):
    # SGLang captures its decode graphs with the capture hooks inside (after eager warm-up
    # runs of the same batch) and calls on_forward_end on the host after each replay.
    theirs, ours = _capturers(sglang, "cuda")
    engine = Engine([theirs, ours], "cuda", overlap=True)
    rows = 4
    static = {layer: torch.zeros((rows, TOP_K), dtype=torch.int32, device="cuda")
              for layer in MOE_LAYERS}

    def run_layers():
        for layer in MOE_LAYERS:
            for capturer in engine.capturers:
                capturer.capture(layer, static[layer])

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            run_layers()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run_layers()

    # A replay straight after the capture runs into the pass holding the warm-up runs' ids:
    # its tokens are not recorded (SGLang has them: its buffer takes the last write).
    lost = engine.alloc(2)
    engine.req_to_token[5, :2] = torch.tensor(lost, dtype=torch.int32)
    for layer in MOE_LAYERS:
        static[layer].copy_(torch.from_numpy(engine.routing(rows)[:, 0, :].copy()))
    graph.replay()
    batch = types.SimpleNamespace(out_cache_loc=torch.tensor(lost, device="cuda"),
                                  out_cache_loc_virtual=None)
    for capturer in engine.capturers:
        assert capturer.on_forward_end(batch, True, rows) is None
    assert ours.faults == {"forward_after_graph_capture": 2}
    assert not ours.get_topk(5, 3, engine.pool).any()
    assert theirs.get_topk(5, 3, engine.pool)[:, list(MOE_LAYERS)].any()
    ours._faults.clear()

    slots = engine.alloc(6)
    engine.forward([(0, 0, slots[:3]), (1, 0, slots[3:])])  # an eager prefill
    lengths = [3, 3]
    for _ in range(5):
        new = engine.alloc(2)
        spans = [(0, lengths[0], new[:1]), (1, lengths[1], new[1:])]
        for request, first, request_slots in spans:
            engine.req_to_token[request, first] = request_slots[0]
        routing = engine.routing(rows)
        for column, layer in enumerate(MOE_LAYERS):
            static[layer].copy_(torch.from_numpy(routing[:, column, :].copy()))
        graph.replay()
        batch = types.SimpleNamespace(out_cache_loc=torch.tensor(new, device="cuda"),
                                      out_cache_loc_virtual=None)
        outputs = [capturer.on_forward_end(batch, True, rows, no_copy_to_cpu=True)
                   for capturer in engine.capturers]
        engine.pending.append((outputs, new, routing))
        if len(engine.pending) > 1:
            engine.finalize_one()
        lengths = [lengths[0] + 1, lengths[1] + 1]
    engine.flush()
    _same_topk(sglang, engine, 0, lengths[0] + 1)
    _same_topk(sglang, engine, 1, lengths[1] + 1)
    tallies = ours.tallies()
    # The second eager warm-up run began a new pass.
    assert tallies["layers_written_twice"] == 0 and tallies["stray_passes"] == 1
    assert ours.faults == {}
