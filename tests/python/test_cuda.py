"""CudaRecorder through Python with torch CUDA tensors: eager hooks, a pass captured in a torch
CUDA graph and replayed with a changing device-side valid-token count, hooks captured outside
any pass and replayed inside eager passes, and torch adds into pass_count_row. Skipped without
a CUDA build, torch or a GPU (run on a GPU machine)."""
import sys

import numpy as np
import pytest

import moestat

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not (moestat.has_cuda and torch.cuda.is_available()),
                                reason="needs moestat's CUDA recorder and a GPU")

LAYERS, EXPERTS, TOP_K, TOKENS = 4, 64, 8, 300


def routed(generator):
    """[TOKENS, TOP_K] distinct experts per token, on the GPU."""
    scores = torch.rand(TOKENS, EXPERTS, generator=generator)
    return scores.argsort(dim=1)[:, :TOP_K].to(torch.int32).cuda()


def test_eager_hooks_equal_the_cpu_recorder():
    topology = moestat.ModelTopology.uniform(LAYERS, EXPERTS, TOP_K)
    gpu = moestat.CudaRecorder(topology, window_size=10)
    cpu = moestat.CpuRecorder(topology, window_size=10)
    generator = torch.Generator().manual_seed(1)
    stream = torch.cuda.current_stream()
    gpu.set_stream(stream.cuda_stream)
    for recorder in (gpu, cpu):
        recorder.start()
    for step in range(3):
        gpu.begin_pass(step)
        cpu.begin_pass(step)
        for layer in range(LAYERS):
            ids = routed(generator)
            if layer == 1:
                ids = ids.to(torch.int64).t().contiguous().t()  # int64, column-major
            gpu.record_topk(layer, ids, num_valid_tokens=TOKENS - 7 * layer)
            cpu.record_topk(layer, ids.cpu(), num_valid_tokens=TOKENS - 7 * layer)
        gpu.end_pass()
        cpu.end_pass()
    stream.synchronize()
    np.testing.assert_array_equal(gpu.snapshot().logical_counts, cpu.snapshot().logical_counts)


def test_a_captured_pass_replays_with_a_device_valid_count():
    topology = moestat.ModelTopology.uniform(LAYERS, EXPERTS, TOP_K)
    gpu = moestat.CudaRecorder(topology, window_size=100)
    generator = torch.Generator().manual_seed(2)
    ids = [routed(generator) for _ in range(LAYERS)]
    valid = torch.zeros(1, dtype=torch.int32, device="cuda")
    stream = torch.cuda.Stream()
    gpu.set_stream(stream.cuda_stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        gpu.begin_pass(0)
        for layer in range(LAYERS):
            gpu.record_topk(layer, ids[layer], num_valid_tokens=valid)
        gpu.end_pass()
    gpu.start()
    expected = np.zeros((5, LAYERS, EXPERTS), dtype=np.int64)
    for step in range(5):
        rows = 50 * (step + 1)
        with torch.cuda.stream(stream):
            valid.fill_(rows)
            graph.replay()
        for layer in range(LAYERS):
            flat = ids[layer][:rows].reshape(-1).cpu().numpy()
            expected[step, layer] = np.bincount(flat, minlength=EXPERTS)
    stream.synchronize()
    snapshot = gpu.snapshot()
    assert snapshot.window_size == 5
    np.testing.assert_array_equal(snapshot.logical_counts, expected)
    assert snapshot.pass_num_tokens.tolist() == [50, 100, 150, 200, 250]


def test_hooks_captured_outside_a_pass_count_into_the_pass_open_at_replay():
    # SGLang captures its decode graphs outside any forward pass and opens the pass eagerly
    # around each replay.
    topology = moestat.ModelTopology.uniform(LAYERS, EXPERTS, TOP_K)
    gpu = moestat.CudaRecorder(topology, window_size=100)
    generator = torch.Generator().manual_seed(4)
    layers = (1, 3)
    ids = [routed(generator) for _ in layers]
    valid = torch.zeros(1, dtype=torch.int32, device="cuda")
    stream = torch.cuda.Stream()
    gpu.set_stream(stream.cuda_stream)
    with pytest.raises(moestat.Error, match="outside a pass"):
        gpu.record_topk(layers[0], ids[0])  # eager: it would count nowhere
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for layer, layer_ids in zip(layers, ids):
            gpu.record_topk(layer, layer_ids, num_valid_tokens=valid)

    def replay(step, rows):
        """One pass around a replay; returns the counts it should record."""
        expected = np.zeros((LAYERS, EXPERTS), dtype=np.int64)
        with torch.cuda.stream(stream):
            for layer, layer_ids in zip(layers, ids):
                layer_ids.copy_(routed(generator))
                flat = layer_ids[:rows].reshape(-1).cpu().numpy()
                expected[layer] = np.bincount(flat, minlength=EXPERTS)
            valid.fill_(rows)
            gpu.begin_pass(step)
            graph.replay()
            gpu.end_pass()
        return expected

    # start() clears what came before it, so each check covers one run of recorded passes.
    gpu.start()
    kept = [replay(10, 40), replay(11, TOKENS)]
    gpu.stop()
    replay(12, 100)
    replay(13, 200)
    stream.synchronize()
    snapshot = gpu.snapshot()
    assert snapshot.pass_ids.tolist() == [10, 11]
    assert snapshot.pass_num_tokens.tolist() == [40, TOKENS]
    np.testing.assert_array_equal(snapshot.logical_counts, np.stack(kept))

    gpu.start()
    kept = [replay(14, 7)]
    gpu.stop()
    replay(15, 250)
    stream.synchronize()
    snapshot = gpu.snapshot()
    assert snapshot.pass_ids.tolist() == [14]
    np.testing.assert_array_equal(snapshot.logical_counts, np.stack(kept))


def test_pass_count_row_takes_torch_adds_inside_recorded_passes_only():
    # SGLang's fused dispatch-map kernel adds one per routed (token, k) into the row its
    # recorder hands out, recording or not; index_add_ / scatter_add_ of ones do the same.
    topology = moestat.ModelTopology.uniform(LAYERS, EXPERTS, TOP_K)
    gpu = moestat.CudaRecorder(topology, window_size=10)
    gpu.set_stream(torch.cuda.current_stream().cuda_stream)
    references = sys.getrefcount(gpu)
    rows = {0: gpu.pass_count_row(0), 2: gpu.pass_count_row(2)}
    assert sys.getrefcount(gpu) == references + 2  # each array keeps the recorder alive
    counts = {layer: torch.from_dlpack(row) for layer, row in rows.items()}
    for layer, tensor in counts.items():
        assert tensor.dtype == torch.int32 and tuple(tensor.shape) == (EXPERTS,)
        assert tensor.device == torch.device("cuda", torch.cuda.current_device())
        assert torch.as_tensor(rows[layer]).data_ptr() == tensor.data_ptr()  # no copy
    generator = torch.Generator().manual_seed(5)

    def engine_adds():
        """Adds a batch's routed ids into both rows; returns the counts they carry."""
        expected = np.zeros((LAYERS, EXPERTS), dtype=np.int64)
        for layer, tensor in counts.items():
            flat = routed(generator).reshape(-1).long()
            ones = torch.ones_like(flat, dtype=torch.int32)
            if layer == 0:
                tensor.index_add_(0, flat, ones)
            else:
                tensor.scatter_add_(0, flat, ones)
            expected[layer] = np.bincount(flat.cpu().numpy(), minlength=EXPERTS)
        return expected

    def engine_pass(step):
        gpu.begin_pass(step)
        expected = engine_adds()
        gpu.end_pass()
        return expected

    gpu.start()
    kept = engine_pass(0)
    gpu.stop()
    engine_pass(1)  # not recorded
    engine_adds()  # outside any pass, as an eager warm-up forward
    torch.cuda.current_stream().synchronize()
    snapshot = gpu.snapshot()
    assert snapshot.pass_ids.tolist() == [0]
    np.testing.assert_array_equal(snapshot.logical_counts, kept[None])

    gpu.start()
    kept = engine_pass(2)  # what came before must not leak in
    torch.cuda.current_stream().synchronize()
    snapshot = gpu.snapshot()
    assert snapshot.pass_ids.tolist() == [2]
    np.testing.assert_array_equal(snapshot.logical_counts, kept[None])
    dense_first = moestat.ModelTopology(2, EXPERTS, TOP_K, moe_layers=[False, True])
    with pytest.raises(moestat.Error, match="dense layer"):
        moestat.CudaRecorder(dense_first).pass_count_row(0)

