"""Baseline for the GPU harness: SGLang-style expert-count recording with torch ops.

Times, inside a CUDA graph of 58 MoE layers (E = 288 physical experts, top-8), the two
torch-op recorders SGLang has shipped (the scatter_add_ of a masked id tensor, and the
graph-safe variant that clamps -1 to 0 and adds (id >= 0)), on the same kind of skewed
routing as bench/gpu/record_bench.cpp; and what one trivial torch op (x.add_(1)) costs as a
graph node, FIELD.md's "one empty graph node". Prints one JSON document.
"""
import json
import time

import torch

LAYERS, EXPERTS, TOP_K = 58, 288, 8
TOKENS = (1, 16, 128, 512, 2048, 8192, 32768)
REPLAYS = 60


def masked_scatter(data, layer, topk_ids):
    flat = topk_ids.flatten()
    mask = flat != -1
    data[layer].scatter_add_(0, flat.masked_fill(~mask, 0).long(), mask.int())


def clamped_scatter(data, layer, topk_ids):
    flat = topk_ids.flatten()
    data[layer].scatter_add_(0, flat.clamp(min=0).long(), (flat >= 0).to(data.dtype))


def skewed_ids(tokens, dtype, generator):
    popularity = torch.distributions.Dirichlet(torch.full((EXPERTS,), 0.3)).sample()
    ids = torch.multinomial(popularity.expand(tokens, EXPERTS), TOP_K, replacement=False,
                            generator=generator)
    ids[torch.rand(tokens, generator=generator) < 0.05] = -1
    return ids.to(dtype).cuda()


def captured(body):
    """A CUDA graph of body(), warmed up on a side stream first, as torch requires."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return graph


def median_replay_us_per_layer(graph):
    for _ in range(5):
        graph.replay()
    times = []
    for _ in range(REPLAYS):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) * 1000.0)
    times.sort()
    return times[len(times) // 2] / LAYERS


def graph_us_per_layer(record, ids):
    data = torch.zeros(LAYERS, EXPERTS, dtype=torch.int32, device="cuda")

    def record_all_layers():
        for layer in range(LAYERS):
            record(data, layer, ids[layer])

    graph = captured(record_all_layers)
    data.zero_()
    graph.replay()
    torch.cuda.synchronize()
    expected = torch.stack([torch.bincount(i.flatten()[i.flatten() >= 0].long(), minlength=EXPERTS)
                            for i in ids]).to(torch.int32)
    exact = bool(torch.equal(data, expected))
    return median_replay_us_per_layer(graph), exact


def trivial_node_us():
    """What one trivial torch op (x.add_(1)) costs as a node of a graph of 58, as
    ../shared/bench/sglang_baseline.py measures "one empty graph node"."""
    x = torch.zeros(1, device="cuda")

    def add_in_every_layer():
        for _ in range(LAYERS):
            x.add_(1)

    return median_replay_us_per_layer(captured(add_in_every_layer))


def eager_host_us_per_layer(record, ids):
    data = torch.zeros(LAYERS, EXPERTS, dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()
    begin = time.perf_counter()
    for _ in range(5):
        for layer in range(LAYERS):
            record(data, layer, ids[layer])
    host = time.perf_counter() - begin
    torch.cuda.synchronize()
    return host / (5 * LAYERS) * 1e6


def main():
    generator = torch.Generator().manual_seed(0)
    rows = []
    for dtype in (torch.int32, torch.int64):
        for tokens in TOKENS:
            ids = [skewed_ids(tokens, dtype, generator) for _ in range(LAYERS)]
            row = {"dtype": str(dtype).split(".")[-1], "tokens": tokens}
            for name, record in (("masked_scatter", masked_scatter),
                                 ("clamped_scatter", clamped_scatter)):
                us, exact = graph_us_per_layer(record, ids)
                row[name] = {"graph_us": round(us, 4), "exact": exact,
                             "eager_host_us": round(eager_host_us_per_layer(record, ids), 3)}
            rows.append(row)
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "layers": LAYERS, "physical_experts": EXPERTS, "top_k": TOP_K,
                      "trivial_node_us": round(trivial_node_us(), 4), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
