"""moestat.vllm's count of a pass's real rows from vLLM's padding mask, read inside a captured
CUDA graph on the GPU (skipped without CUDA or vLLM).

vLLM's model runner fills ForwardContext.is_padding in place before every forward (every row,
for the dummy batch of an idle data-parallel rank), and recording.py counts the pass's real
rows from it. A graph captured with the forward context set, replayed with the mask refilled
in place, must count each replay's real rows only: the expectation is a tally of the ids
vLLM's own routers returned in that replay. Captured eagerly and compiled by inductor (where
moestat_vllm::record_topk reads the mask as it runs).

vLLM's Python runs here under its CPU platform on purpose: its CUDA platform imports vLLM's
compiled kernels when it loads, and those load only against the torch vLLM 0.33.0 pins
(run_device_vllm.sh). The routers' top-k is the same torch code on either platform; the
recording under test is moestat's. test_vllm_cuda.py covers EPLB's Triton kernel in the same
graph. Run in a pytest process of its own: vLLM keeps one platform per process.
"""
import os
import pathlib
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
try:
    import vllm_gpu_platform
    vllm_gpu_platform.use_cpu_platform()  # before any other vLLM module reads it
except Exception as error:  # pragma: no cover - vLLM absent
    pytest.skip(f"vLLM's platforms do not import: {error!r}", allow_module_level=True)

import vllm_harness  # noqa: E402,F401 - vLLM's modules, or a skip

try:
    from vllm.forward_context import ForwardContext, override_forward_context
    from vllm_stand_in_model import HIDDEN, NUM_EXPERTS, NUM_LAYERS, TOP_K, Model, make_router
except Exception as error:  # pragma: no cover - vLLM without its router modules' imports
    pytest.skip(f"vLLM's router modules do not import: {error!r}", allow_module_level=True)

import moestat  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import hf_step_cost  # noqa: E402 (bench/ is not a package): its CUDA graph capture
from moestat.vllm import recording  # noqa: E402

DEVICE = torch.device("cuda")
PADDED = 8                  # the captured batch
REAL_TOKENS = [5, 8, 0, 1]  # what each replay's batch really holds; 0: a dummy batch


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "inductor"])
def test_a_captured_graph_counts_the_real_rows_of_the_mask_refilled_in_place(compiled):
    torch._dynamo.reset()
    model = Model(seed=7, router=lambda layer: make_router(layer, device=DEVICE)).to(DEVICE)
    recorder = moestat.CudaRecorder(recording.topology_from_model(model, NUM_LAYERS))
    handle = recording.attach(model, recorder, passes=False)
    forward = torch.compile(model.forward, fullgraph=True) if compiled else model.forward
    hidden = torch.zeros(PADDED, HIDDEN, device=DEVICE)
    is_padding = torch.zeros(PADDED, dtype=torch.bool, device=DEVICE)
    context = ForwardContext(no_compile_layers={}, attn_metadata={}, slot_mapping={},
                             is_padding=is_padding)

    def step():
        handle.begin_pass()
        forward(hidden)
        handle.end_pass()

    with torch.no_grad(), override_forward_context(context):
        # warm-up (and compilation) on a side stream, the recorder off: nothing is counted
        graph = hf_step_cost.captured(step)
        # the ids each layer returns at every replay (the graph's own output tensors)
        returned = {layer: moe.routed[-1] for layer, moe in model.moe().items()}

        recorder.start()
        generator = torch.Generator(device=DEVICE).manual_seed(8)
        expected = np.zeros((len(REAL_TOKENS), NUM_LAYERS, NUM_EXPERTS), np.int64)
        for call, real in enumerate(REAL_TOKENS):
            hidden.copy_(torch.randn(PADDED, HIDDEN, device=DEVICE, generator=generator))
            is_padding.copy_(torch.arange(PADDED, device=DEVICE) >= real)  # as vLLM: in place
            graph.replay()
            for layer, ids in returned.items():
                kept = ids[:real].long().cpu().reshape(-1).numpy()
                expected[call, layer] = np.bincount(kept, minlength=NUM_EXPERTS)
        torch.cuda.synchronize()
    handle.detach()

    snapshot = recorder.snapshot()
    np.testing.assert_array_equal(snapshot.logical_counts, expected)
    assert snapshot.pass_num_tokens.tolist() == REAL_TOKENS
    assert snapshot.dropped_ids == 0
    assert expected[1].sum() == PADDED * TOP_K * len(model.moe())  # the graph routed them all
