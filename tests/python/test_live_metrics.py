"""Live metrics of a running CPU recorder through Python: the HTTP endpoint scraped with
urllib and parsed with prometheus_client's parser, every value checked against a numpy
recomputation from the recorder's own snapshot; the file; the coverage check."""
import socket
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

import moestat

parser = pytest.importorskip("prometheus_client.parser")

NUM_LAYERS, NUM_EXPERTS, NUM_SLOTS, TOP_K, NUM_GPUS = 4, 6, 8, 2, 4


def recorder_with_passes(rng, num_passes, skipped_layer=None):
    topology = moestat.ModelTopology(NUM_LAYERS, NUM_EXPERTS, TOP_K, num_physical_experts=NUM_SLOTS,
                                     moe_layers=[False, True, True, True], ep_size=NUM_GPUS)
    recorder = moestat.CpuRecorder(topology, window_size=64)
    recorder.start()
    for pass_id in range(num_passes):
        run_pass(recorder, rng, pass_id, skipped_layer)
    return recorder


def run_pass(recorder, rng, pass_id, skipped_layer=None):
    recorder.begin_pass(pass_id)
    for layer in range(1, NUM_LAYERS):
        if layer != skipped_layer:
            # Skewed towards low slots, with padding (-1) and an out-of-range id (NUM_SLOTS).
            ids = np.minimum(rng.integers(-1, NUM_SLOTS + 1, (3 + pass_id % 5, TOP_K)),
                             rng.integers(0, NUM_SLOTS + 1, (3 + pass_id % 5, TOP_K)))
            recorder.record_topk(layer, ids)
    recorder.end_pass()


def reference(snapshot):
    """Per-pass GPU loads [W, L, G] and SGLang's balancedness [W] from the snapshot."""
    loads = snapshot.physical_counts.reshape(snapshot.window_size, NUM_LAYERS, NUM_GPUS, -1).sum(-1)
    utilisation = (loads.mean(-1) + 1e-5) / (loads.max(-1) + 1e-5)
    return loads, utilisation.mean(-1)


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"] == moestat.prometheus_content_type
        text = response.read().decode()
    samples = {}
    types = {}
    for family in parser.text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return types, samples


@pytest.mark.skipif(not moestat.has_http, reason="built without the metrics server")
def test_a_running_recorder_is_scraped_and_equals_its_snapshot(rng):
    recorder = recorder_with_passes(rng, 13)
    metrics = moestat.LiveMetrics(recorder, num_hottest_experts=3)
    with moestat.MetricsServer(metrics) as server:
        assert server.host == "127.0.0.1" and server.port > 0
        # Passes keep running on another thread while the endpoint is scraped.
        worker = threading.Thread(target=lambda: [run_pass(recorder, rng, 13 + i) for i in range(40)])
        worker.start()
        scrape(server.port)
        worker.join()
        types, samples = scrape(server.port)
    snapshot = recorder.snapshot()
    loads, balancedness = reference(snapshot)

    assert types["moestat_passes_observed"] == "counter"  # the parser drops _total
    assert types["moestat_pass_balancedness_ratio"] == "gauge"
    assert samples[("moestat_passes_observed_total", ())] == 53
    assert samples[("moestat_passes_recorded_total", ())] == snapshot.num_passes == 53
    assert samples[("moestat_dropped_ids_total", ())] == snapshot.dropped_ids > 0
    assert samples[("moestat_last_pass_id", ())] == 52
    assert samples[("moestat_pass_balancedness_ratio", ())] == pytest.approx(balancedness[-1], rel=1e-12)
    for window in (10, 100, 1000):
        key = ("moestat_balancedness_mean_ratio", (("passes", str(window)),))
        assert samples[key] == pytest.approx(balancedness[-window:].mean(), rel=1e-12)
    for layer in range(1, NUM_LAYERS):
        for gpu in range(NUM_GPUS):
            labels = (("gpu", str(gpu)), ("layer", str(layer)))
            assert samples[("moestat_pass_gpu_load_assignments", labels)] == loads[-1, layer, gpu]
            assert samples[("moestat_gpu_assignments_total", labels)] == loads[:, layer, gpu].sum()
    totals = snapshot.logical_totals()
    hottest = sorted(((-totals[l, e], l, e) for l in range(NUM_LAYERS) for e in range(NUM_EXPERTS)))[:3]
    for count, layer, expert in hottest:
        key = ("moestat_hot_expert_assignments", (("expert", str(expert)), ("layer", str(layer))))
        assert samples[key] == -count
    with pytest.raises(urllib.error.URLError):
        scrape(server.port)  # stopped with the context


@pytest.mark.skipif(not moestat.has_http, reason="built without the metrics server")
def test_the_endpoint_is_read_only(rng):
    metrics = moestat.LiveMetrics(recorder_with_passes(rng, 1))
    server = moestat.MetricsServer(metrics, port=0)
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}/metrics", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 405
    server.stop()


def http_status(port, headers=None):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as refused:
        return refused.code


@pytest.mark.skipif(not moestat.has_http, reason="built without the metrics server")
def test_the_endpoint_limits_reach_python(rng):
    metrics = moestat.LiveMetrics(recorder_with_passes(rng, 1))
    with moestat.MetricsServer(metrics, max_connections=1, request_timeout=0.2,
                               max_header_count=8) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as idle:
            # The one place is taken: refused at once, not queued behind the idle client.
            assert http_status(server.port) == 503
            # Closed at the deadline, without an answer (the 10 s timeout is a safety net).
            assert idle.recv(1) == b""
        assert http_status(server.port) == 200
        assert http_status(server.port, {f"X-{i}": "y" for i in range(8)}) == 431
    with moestat.MetricsServer(metrics, max_connections_per_client=1,
                               request_timeout=600) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10):
            # This address's one place is taken; another address is served.
            assert http_status(server.port) == 503
            with socket.create_connection(("127.0.0.1", server.port), timeout=10,
                                          source_address=("127.0.0.2", 0)) as other:
                other.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                with other.makefile("rb") as answer:
                    assert answer.read().startswith(b"HTTP/1.1 200 ")
    with pytest.raises(moestat.Error, match="request_timeout nan s is not a positive"):
        moestat.MetricsServer(metrics, request_timeout=float("nan"))
    with pytest.raises(moestat.Error, match="max_connections 0 is not positive"):
        moestat.MetricsServer(metrics, max_connections=0)
    with pytest.raises(moestat.Error, match="max_connections_per_client 0 is not positive"):
        moestat.MetricsServer(metrics, max_connections_per_client=0)


def test_values_file_and_coverage(rng, tmp_path):
    recorder = recorder_with_passes(rng, 5, skipped_layer=2)
    names = ["embed", "layers.1.mlp", "layers.2.mlp", "layers.3.mlp"]
    values = moestat.LiveMetrics(recorder, layer_names=names).update()
    assert values.uncovered_layers() == ["layers.2.mlp"]
    np.testing.assert_array_equal(values.uncovered_passes, [0, 0, 5, 0])
    loads, balancedness = reference(recorder.snapshot())
    np.testing.assert_array_equal(values.last_pass_gpu_loads, loads[-1])
    np.testing.assert_array_equal(values.gpu_assignments_total, loads.sum(0))
    assert [mean.num_passes for mean in values.balancedness_means] == [5, 5, 5]
    path = tmp_path / "moestat.prom"
    moestat.write_prometheus_file(path, values)
    assert path.read_text() == moestat.prometheus_text(values)
    families = {f.name: f for f in parser.text_string_to_metric_families(path.read_text())}
    uncovered = families["moestat_layer_uncovered_passes"].samples
    assert {s.labels["layer"]: s.value for s in uncovered} == {"layers.1.mlp": 0, "layers.2.mlp": 5,
                                                               "layers.3.mlp": 0}


def test_refuses_a_recorder_without_a_pass_window():
    recorder = moestat.CpuRecorder(moestat.ModelTopology.uniform(2, 4, 1), mode="decayed")
    with pytest.raises(moestat.Error, match="keeps passes"):
        moestat.LiveMetrics(recorder)
