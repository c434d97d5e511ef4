"""moestat.integrations.transformers_routes on tiny random-weight models of every supported
architecture, on the CPU: the routes captured from generate() on a left-padded batch are, for
every sequence, position and MoE layer, the experts the model's own router logits pick; padding
is never recorded; positions start at each sequence's first real token."""
import pytest
import torch

import moestat
from moestat.integrations import transformers as moestat_hf
from moestat.integrations import transformers_routes

import hf_models

ARCHITECTURES = hf_models.available_architectures()


def route_recorder_for(model, **options):
    recorder_type = (moestat.CpuRouteRecorder if next(model.parameters()).device.type == "cpu"
                     else moestat.CudaRouteRecorder)
    return recorder_type(moestat_hf.topology_from_config(model.config), **options)


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not (torch.cuda.is_available() and moestat.has_cuda), reason="needs CUDA"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_generate_captures_each_sequences_routes_as_its_routers_chose_them(model_type, device):
    model = hf_models.tiny_model(model_type, seed=2).to(device)
    lengths = (7, 4, 6)
    input_ids, attention_mask = hf_models.padded_batch(seed=2, lengths=lengths, device=device)
    steps = hf_models.router_logits_of_each_forward(model)
    recorder = route_recorder_for(model)
    new_tokens = 4
    requests = ["a", "b", "c"]
    with torch.no_grad(), transformers_routes.capture(model, recorder, requests) as capture:
        model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=new_tokens,
                       min_new_tokens=new_tokens, do_sample=False)
    routes = capture.finish()
    moe_layers = sorted(hf_models.routers_by_layer(model))
    width = input_ids.shape[1]
    for b, request in enumerate(requests):
        got = routes[request]
        # Prompt and output tokens, less the last sampled one (never fed forward).
        assert got.first_position == 0
        assert got.num_tokens == lengths[b] + new_tokens - 1
        assert got.complete
        assert got.layout.layers == moe_layers
        # Row p: the prefill's real tokens, then one row per decode step.
        for position in range(got.num_tokens):
            if position < lengths[b]:
                step, row = 0, b * width + (width - lengths[b]) + position
            else:
                step, row = position - lengths[b] + 1, b
            for column, layer in enumerate(moe_layers):
                logits = steps[step][column]
                want = hf_models.top_k_from_logits(model, layer, logits)[row].cpu()
                assert sorted(got.ids[position, column].tolist()) == sorted(want.tolist()), (
                    f"{request} position {position} layer {layer}")
    assert recorder.tallies()["passes"] == new_tokens
    assert recorder.tallies()["tokens_held"] == 0
    assert recorder.requests() == []


def test_take_hands_out_only_the_new_positions():
    model = hf_models.tiny_model("qwen3_moe")
    input_ids, attention_mask = hf_models.padded_batch(lengths=(5, 3))
    recorder = route_recorder_for(model)
    with torch.no_grad(), transformers_routes.capture(model, recorder, ["x", "y"]) as capture:
        model(input_ids, attention_mask=attention_mask)
        first = capture.take()
        next_ids = torch.tensor([[9], [10]])
        mask = torch.cat([attention_mask, torch.ones(2, 1, dtype=attention_mask.dtype)], dim=1)
        model(next_ids, attention_mask=mask)  # without a cache: the positions still follow
        second = capture.take()
    assert [first["x"].num_tokens, first["y"].num_tokens] == [5, 3]
    assert [second["x"].first_position, second["y"].first_position] == [5, 3]
    assert [second["x"].num_tokens, second["y"].num_tokens] == [1, 1]


def test_a_file_of_the_captured_routes_reads_back_equal(tmp_path):
    model = hf_models.tiny_model("mixtral")
    input_ids, attention_mask = hf_models.padded_batch()
    recorder = route_recorder_for(model)
    recorder.set_model("tiny-mixtral")
    with torch.no_grad(), transformers_routes.capture(model, recorder, ["p", "q", "r"]) as capture:
        model(input_ids, attention_mask=attention_mask)
    routes = list(capture.finish().values())
    moestat.write_routes(tmp_path / "rollout.routes.safetensors", routes)
    again = moestat.read_routes(tmp_path / "rollout.routes.safetensors")
    assert again == routes
    assert again[0].model == "tiny-mixtral"


def test_a_batch_that_does_not_match_the_request_ids_is_refused():
    model = hf_models.tiny_model("olmoe")
    input_ids, attention_mask = hf_models.padded_batch()
    recorder = route_recorder_for(model)
    with transformers_routes.capture(model, recorder, ["only-one"]):
        with pytest.raises(moestat.Error, match="a batch of 3 sequences, but 1 request ids"):
            model(input_ids, attention_mask=attention_mask)
    with pytest.raises(moestat.Error, match="distinct"):
        transformers_routes.capture(model, recorder, ["a", "a"])
    other = moestat.CpuRouteRecorder(moestat.ModelTopology.uniform(4, 6, 2))
    with pytest.raises(moestat.Error, match="num_experts=8"):
        transformers_routes.capture(model, other, ["a", "b", "c"])
