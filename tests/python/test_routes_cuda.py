"""CudaRouteRecorder through Python with torch CUDA tensors: eager passes equal the CPU route
recorder's, and a forward captured in a torch CUDA graph, replayed with a new batch each time
(begin_pass / end_pass around the replay), gives every request its rows. Skipped without a CUDA
build, torch or a GPU (run on a GPU machine)."""
import numpy as np
import pytest

import moestat

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not (moestat.has_cuda and torch.cuda.is_available()),
                                reason="needs moestat's CUDA recorders and a GPU")

LAYERS, EXPERTS, TOP_K, ROWS = 5, 160, 8, 48


def topology():
    return moestat.ModelTopology(LAYERS, EXPERTS, TOP_K,
                                 moe_layers=[False, True, True, True, True])


def routed(generator, rows=ROWS):
    scores = torch.rand(rows, EXPERTS, generator=generator)
    return scores.argsort(dim=1)[:, :TOP_K].to(torch.int32)


def test_eager_passes_equal_the_cpu_route_recorder():
    gpu = moestat.CudaRouteRecorder(topology(), max_tokens_per_pass=ROWS)
    cpu = moestat.CpuRouteRecorder(topology(), max_tokens_per_pass=ROWS)
    gpu.set_stream(torch.cuda.current_stream().cuda_stream)
    generator = torch.Generator().manual_seed(3)
    for step in range(6):
        batch = [("a", 0 if step == 0 else 9 + step, 10 if step == 0 else 1),
                 ("b", step, 1, 20)]  # b in batch row 20
        gpu.begin_pass()
        cpu.begin_pass()
        layers = [1, 2, 3, 4]
        ids = [routed(generator) for _ in layers]
        # int64 and a non-contiguous view on two layers.
        ids[1] = ids[1].to(torch.int64)
        ids[2] = torch.cat([ids[2], ids[2]], dim=1)[:, :TOP_K]
        gpu.record_topk_layers(layers, [layer_ids.cuda() for layer_ids in ids])
        cpu.record_topk_layers(layers, [layer_ids.numpy() for layer_ids in ids])
        gpu.end_pass(batch)
        cpu.end_pass(batch)
    for request in ("a", "b"):
        assert gpu.finish(request) == cpu.finish(request)


def test_a_captured_forward_replayed_with_new_batches():
    gpu = moestat.CudaRouteRecorder(topology(), max_tokens_per_pass=ROWS, capacity_tokens=4096)
    cpu = moestat.CpuRouteRecorder(topology(), max_tokens_per_pass=ROWS, capacity_tokens=4096)
    static_ids = [torch.zeros(ROWS, TOP_K, dtype=torch.int32, device="cuda") for _ in range(4)]
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        gpu.set_stream(stream.cuda_stream)
        with torch.cuda.graph(graph, stream=stream):
            # No pass is open while the stream is captured: the kernels run at each replay.
            gpu.record_topk_layers([1, 2, 3, 4], static_ids)
    generator = torch.Generator().manual_seed(4)
    positions = [0] * 7
    with torch.cuda.stream(stream):
        gpu.set_stream(stream.cuda_stream)
        for step in range(40):
            batch = [(f"r{i}", positions[i], 1) for i in range(step % 7 + 1)]
            for i in range(step % 7 + 1):
                positions[i] += 1
            ids = [routed(generator) for _ in range(4)]
            for buffer, layer_ids in zip(static_ids, ids):
                buffer.copy_(layer_ids, non_blocking=False)
            gpu.begin_pass()
            graph.replay()
            gpu.end_pass(batch)
            cpu.begin_pass()
            cpu.record_topk_layers([1, 2, 3, 4], [layer_ids.numpy() for layer_ids in ids])
            cpu.end_pass(batch)
    torch.cuda.synchronize()
    for i in range(7):
        got, want = gpu.finish(f"r{i}"), cpu.finish(f"r{i}")
        assert got == want
        assert got.complete and got.num_tokens > 0
    assert gpu.tallies()["layers_written_twice"] == 0
