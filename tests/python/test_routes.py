"""Per-request routes through Python on numpy arrays: the CPU route recorder (request and slot
keys) against a numpy reference, RoutedExperts' construction and checks, routes files."""
import numpy as np
import pytest

import moestat


def topology():
    # Layer 0 dense; 6 experts on 8 slots; top-2.
    return moestat.ModelTopology(3, 6, 2, moe_layers=[False, True, True], num_physical_experts=8)


def test_the_recorder_keeps_each_requests_logical_routes_by_position(rng):
    recorder = moestat.CpuRouteRecorder(topology(), max_tokens_per_pass=16, capacity_tokens=64)
    placement = moestat.Placement(np.array([[0, 1, 2, 3, 4, 5, 0, 1]] * 3, dtype=np.int32), 6,
                                  version=4)
    recorder.set_placement(placement)
    expected = {"a": [], "b": []}
    positions = {"a": 0, "b": 0}
    for step in range(5):
        batch = [("a", positions["a"], 3 if step == 0 else 1), ("b", positions["b"], 1)]
        rows = sum(count for _, _, count in batch) + 2  # two padding rows
        recorder.begin_pass()
        per_layer = {}
        for layer in (1, 2):
            # Distinct logical experts: slots 6, 7 stand for experts 0, 1.
            ids = np.stack([rng.permutation([0, 2, 3, 4, 5, 7])[:2] for _ in range(rows)])
            per_layer[layer] = ids
            recorder.record_topk(layer, ids.astype(np.int32 if layer == 1 else np.int64))
        recorder.end_pass(batch)
        row = 0
        for request, first, count in batch:
            for _ in range(count):
                logical = [placement.physical_to_logical[layer][per_layer[layer][row]]
                           for layer in (1, 2)]
                expected[request].append(np.stack(logical))
                row += 1
            positions[request] += count
    first_take = recorder.take("a")
    assert (first_take.first_position, first_take.num_tokens) == (0, 7)
    rest = recorder.finish("a")
    assert rest.num_tokens == 0 and rest.first_position == 7
    b = recorder.finish("b")
    for request, routes in (("a", first_take), ("b", b)):
        assert routes.ids.dtype == np.uint8
        assert routes.complete
        np.testing.assert_array_equal(routes.ids, np.stack(expected[request]))
        assert routes.placement_version == 4
    tallies = recorder.tallies()
    assert tallies["passes"] == 5 and tallies["tokens_held"] == 0
    assert recorder.capacity_bytes == 64 * recorder.layout.bytes_per_token == 64 * 2 * 3


def test_take_many_reads_every_request_in_the_order_asked():
    recorder = moestat.CpuRouteRecorder(moestat.ModelTopology.uniform(2, 4, 2),
                                        max_tokens_per_pass=4, capacity_tokens=8)
    ids = np.array([[0, 1], [2, 3], [1, 2]], dtype=np.int32)
    for step in range(2):
        recorder.begin_pass()
        for layer in (0, 1):
            recorder.record_topk(layer, ids if step == 0 else ids[:, ::-1].copy())
        recorder.end_pass([("a", step, 1), ("b", 2 * step, 2)])
    taken = recorder.take_many(["b", "unseen", "a", "b"])
    assert [routes.request_id for routes in taken] == ["b", "unseen", "a", "b"]
    assert [routes.num_tokens for routes in taken] == [4, 0, 2, 0]
    np.testing.assert_array_equal(taken[2].ids[:, 0], [[0, 1], [1, 0]])
    np.testing.assert_array_equal(taken[0].ids[:, 1], [[2, 3], [1, 2], [3, 2], [2, 1]])
    assert recorder.tallies()["tokens_held"] == 0 and sorted(recorder.requests()) == ["a", "b"]
    assert [routes.num_tokens for routes in recorder.finish_many(["a", "b"])] == [0, 0]
    assert recorder.requests() == []


def test_slot_keys_read_rows_in_the_order_asked():
    recorder = moestat.CpuRouteRecorder(moestat.ModelTopology.uniform(1, 4, 2),
                                        max_tokens_per_pass=4, capacity_tokens=8, keys="slots")
    recorder.begin_pass()
    recorder.record_topk(0, np.array([[0, 1], [2, 3]], dtype=np.int32))
    recorder.end_pass_slots([6, 3])
    routes = recorder.read_slots([3, 6, 0], request_id="r", first_position=2)
    np.testing.assert_array_equal(routes.ids[:, 0], [[2, 3], [0, 1], [0, 0]])
    np.testing.assert_array_equal(routes.valid[:, 0], [True, True, False])
    with pytest.raises(moestat.Error, match="needs request-position keys"):
        recorder.take("r")


def test_a_pending_pass_gets_its_slots_when_committed():
    recorder = moestat.CpuRouteRecorder(moestat.ModelTopology.uniform(1, 4, 2),
                                        max_tokens_per_pass=4, capacity_tokens=6, keys="slots",
                                        num_slots=4)
    recorder.begin_pass()
    recorder.record_topk(0, np.array([[0, 1], [2, 3], [1, 2]], dtype=np.int32))
    pending = recorder.end_pass_pending(1, 2)  # row 0 is another rank's
    assert (pending.num_tokens, pending.tokens_without_room) == (2, 0)
    assert recorder.tallies()["tokens_pending"] == 2
    assert not recorder.read_slots([3]).valid.any()  # no slot yet
    assert recorder.commit_slots(pending, [3, 9]) == {"slots_out_of_range": 1,
                                                       "slots_repeated": 0}
    np.testing.assert_array_equal(recorder.read_slots([3]).ids[0, 0], [2, 3])
    assert not recorder.release_pending(pending)  # committed already
    with pytest.raises(moestat.Error, match="committed or released already"):
        recorder.commit_slots(pending, [0, 1])
    assert recorder.clear_slots([3, -1]) == 1
    assert not recorder.read_slots([3]).valid.any()
    assert recorder.tallies()["tokens_held"] == 0
    with pytest.raises(moestat.Error, match=r"num_slots 7 outside \[0, capacity_tokens \(6\)\]"):
        moestat.CpuRouteRecorder(moestat.ModelTopology.uniform(1, 4, 2), capacity_tokens=6,
                                 keys="slots", num_slots=7)


def test_routed_experts_are_checked_and_round_trip_through_a_file(tmp_path):
    layout = moestat.RouteLayout(4, [1, 3], 300, 2)
    assert layout.id_dtype == np.uint16
    ids = np.array([[[0, 299], [5, 6]], [[7, 8], [0, 0]]])
    valid = np.array([[True, True], [True, False]])
    routes = moestat.RoutedExperts(layout, ids, valid, request_id="r", first_position=3,
                                   model="m", placement_version=2)
    assert routes.ids.dtype == np.uint16 and not routes.complete
    assert routes.slice(1, 2).first_position == 4
    path = tmp_path / "one.routes.safetensors"
    # A file holds each request once: another request beside it.
    other = moestat.RoutedExperts(layout, ids[:1], valid[:1], request_id="s")
    moestat.write_routes(path, [routes, other])
    again = moestat.read_routes(path)
    assert again[0] == routes and again[1].num_tokens == 1
    with pytest.raises(moestat.Error, match="expert 300 outside"):
        moestat.RoutedExperts(layout, np.array([[[300, 1], [0, 1]]]))
    with pytest.raises(moestat.Error, match="chose an expert twice"):
        moestat.RoutedExperts(layout, np.array([[[1, 1], [0, 1]]]))
    with pytest.raises(moestat.Error, match="not valid, so its ids must be 0"):
        moestat.RoutedExperts(layout, np.array([[[1, 2], [0, 1]]]), np.array([[False, True]]))
    with pytest.raises(moestat.Error, match=r"ids must be \[tokens, 2, 2\]"):
        moestat.RoutedExperts(layout, np.zeros((2, 3, 2), dtype=np.int32))
    with pytest.raises(moestat.Error, match="must be integers"):
        moestat.RoutedExperts(layout, np.zeros((1, 2, 2), dtype=np.float32))
    with pytest.raises(moestat.Error, match="not a routes file"):
        moestat.write_placement(tmp_path / "p.safetensors",
                                moestat.Placement(np.array([[0, 1]], dtype=np.int32), 2))
        moestat.read_routes(tmp_path / "p.safetensors")


def test_the_recorders_refuse_batches_that_do_not_fit():
    recorder = moestat.CpuRouteRecorder(moestat.ModelTopology.uniform(1, 4, 2),
                                        max_tokens_per_pass=4)
    recorder.begin_pass()
    with pytest.raises(moestat.Error, match="appears twice"):
        recorder.end_pass([("a", 0, 1), ("a", 1, 1)])
    with pytest.raises(TypeError, match="request_id: str, first_position: int"):
        recorder.end_pass([("a", "zero", 1)])
    recorder.record_topk(0, np.array([[0, 1], [1, 2], [2, 3]], dtype=np.int32))
    recorder.end_pass([("a", 0, 1), ("b", 5, 1, 2)])  # b in batch row 2: spans mix 3 and 4 fields
    assert recorder.finish("b").ids[0, 0].tolist() == [2, 3]
    with pytest.raises(moestat.Error, match="keys must be 'requests' or 'slots'"):
        moestat.CpuRouteRecorder(moestat.ModelTopology.uniform(1, 4, 2), keys="kv")


def one_layer_recorder(capacity_tokens):
    return moestat.CpuRouteRecorder(moestat.ModelTopology.uniform(1, 4, 2), max_tokens_per_pass=4,
                                    capacity_tokens=capacity_tokens)


def route_pass(recorder, batch, ids):
    recorder.begin_pass()
    recorder.record_topk(0, np.array(ids, dtype=np.int32))
    recorder.end_pass(batch)


def test_a_refused_batch_changes_nothing():
    recorder = one_layer_recorder(3)
    route_pass(recorder, [("done", 0, 1)], [[3, 0]])
    recorder.finish("done")  # its row is free again, and still holds its ids
    recorder.begin_pass()
    recorder.record_topk(0, np.array([[1, 2], [2, 3], [0, 1]], dtype=np.int32))
    with pytest.raises(moestat.Error, match="end past the largest position"):
        recorder.end_pass([("a", 0, 1), ("b", 2**62, 1)])
    with pytest.raises(moestat.Error, match="end past the largest position"):
        recorder.end_pass([("a", 0, 1), ("b", 2**63 - 3, 2)])
    recorder.abort_pass()
    assert recorder.requests() == [] and recorder.take("a").num_tokens == 0
    assert recorder.tallies()["tokens_held"] == 0
    route_pass(recorder, [("a", 0, 3)], [[0, 1], [1, 2], [2, 3]])
    assert recorder.finish("a").complete  # the whole store was still free


def test_gaps_hold_no_rows_and_are_bounded_by_the_capacity():
    recorder = one_layer_recorder(16)
    route_pass(recorder, [("a", 0, 1)], [[0, 1]])
    with pytest.raises(moestat.Error, match="at most capacity_tokens \\(16\\) positions of gaps"):
        route_pass(recorder, [("a", 3 * 10**8, 1)], [[0, 1]])
    recorder.abort_pass()
    route_pass(recorder, [("a", 17, 1)], [[0, 1]])
    assert recorder.tallies()["tokens_held"] == 2
    a = recorder.take("a")
    assert (a.first_position, a.num_tokens) == (0, 18)
    assert np.flatnonzero(a.valid[:, 0]).tolist() == [0, 17]


def test_invalid_ids_are_counted_for_routed_tokens_only():
    recorder = one_layer_recorder(4)
    # Row 0 is a's, with an id outside [0, 4); the padding rows' bad ids are no token's.
    route_pass(recorder, [("a", 0, 1)], [[0, 9], [4, -1], [1, 1]])
    assert recorder.tallies()["invalid_ids"] == 1
    assert not recorder.take("a").valid[0, 0]


def test_padded_batch_lays_requests_out_after_their_padding():
    from moestat.routing import padded_batch

    layout = moestat.RouteLayout(2, [0, 1], 4, 1)
    a = moestat.RoutedExperts(layout, np.array([[[1], [2]], [[3], [0]]]),
                              np.array([[True, True], [True, False]]), request_id="a")
    b = moestat.RoutedExperts(layout, np.array([[[2], [2]]]), request_id="b", first_position=1)
    ids, valid = padded_batch([a, b], seq_len=4, offsets=[1, 0])
    assert ids.shape == (2, 4, 2, 1) and ids.dtype == np.int64
    np.testing.assert_array_equal(valid[0], [[False, False], [True, True], [True, False],
                                             [False, False]])
    np.testing.assert_array_equal(ids[0, 1:3, :, 0], [[1, 2], [3, 0]])
    np.testing.assert_array_equal(valid[1, :, 0], [False, True, False, False])
    assert padded_batch([a])[0].shape == (1, 2, 2, 1)
    with pytest.raises(moestat.Error, match="does not fit 2 columns"):
        padded_batch([a, b], seq_len=2, offsets=[1, 0])


@pytest.mark.parametrize("num_experts, bits", [(1, 1), (2, 1), (8, 3), (128, 7), (160, 8),
                                               (256, 8), (384, 9), (70000, 17)])
def test_packed_ids_round_trip_in_ceil_log2_bits(rng, num_experts, bits):
    from moestat.routing import bits_per_id, pack_ids, unpack_ids

    assert bits_per_id(num_experts) == bits
    ids = rng.integers(0, num_experts, size=(13, 5, 3))
    packed = pack_ids(ids, num_experts)
    assert len(packed) == (ids.size * bits + 7) // 8
    np.testing.assert_array_equal(unpack_ids(packed, ids.shape, num_experts), ids)


def test_packed_ids_refuse_what_they_cannot_hold():
    from moestat.routing import pack_ids, unpack_ids

    with pytest.raises(moestat.Error, match=r"outside \[0, 8\)"):
        pack_ids(np.array([8]), 8)
    with pytest.raises(moestat.Error, match="must be integers"):
        pack_ids(np.array([0.5]), 8)
    with pytest.raises(moestat.Error, match="3 bytes; 4 ids of 7 bits take 4"):
        unpack_ids(b"abc", (4,), 128)
    with pytest.raises(moestat.Error, match=r"outside \[0, 6\)"):
        unpack_ids(bytes([0xFF]), (2,), 6)  # 3-bit fields of 7
