"""moestat.integrations.transformers on a GPU: tiny random-weight models in bf16 recorded by
CudaRecorder, eagerly (a padded batch, generate()), captured with torch.cuda.graph (a padded
batch where the attention allows it) and replayed with recording switched off and on, and
compiled with mode="reduce-overhead".
Counts must equal a tally of each model's own router outputs (taken by forward hooks on the
routers: DeepSeek-V3 on transformers 5.17 returns no router_logits). Skipped without a GPU
and a CUDA build of moestat.

    PYTHONPATH=build/python python -m pytest -q tests/engines/test_transformers_cuda.py
"""
import re

import numpy as np
import pytest
import torch

import moestat
from moestat.integrations import transformers as moestat_hf

import hf_models

pytestmark = pytest.mark.skipif(not (moestat.has_cuda and torch.cuda.is_available()),
                                reason="needs moestat's CUDA recorder and a GPU")

ARCHITECTURES = hf_models.available_architectures()


def cuda_model(model_type, seed=0, **config_overrides):
    return hf_models.tiny_model(model_type, seed=seed, **config_overrides).to("cuda",
                                                                             torch.bfloat16)


def cuda_recorder(model):
    recorder = moestat.CudaRecorder(moestat_hf.topology_from_config(model.config),
                                    window_size=-1)
    recorder.start()
    return recorder


def snapshot_after_the_gpu(recorder):
    torch.cuda.synchronize()
    return recorder.snapshot()


@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_a_padded_bf16_batch_is_counted_as_the_routers_route_it(model_type):
    model = cuda_model(model_type)
    input_ids, attention_mask = hf_models.padded_batch(device="cuda")
    forwards = hf_models.router_logits_of_each_forward(model)  # the model's own
    recorder = cuda_recorder(model)
    with torch.no_grad(), moestat_hf.attach(model, recorder):
        model(input_ids, attention_mask=attention_mask)
    counts = snapshot_after_the_gpu(recorder).logical_counts
    assert counts.shape[0] == len(forwards) == 1
    np.testing.assert_array_equal(
        counts[0], hf_models.tally(model, forwards[0], attention_mask.bool()))


@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_generate_in_bf16_records_every_step(model_type):
    model = cuda_model(model_type, seed=1)
    input_ids, attention_mask = hf_models.padded_batch(seed=1, device="cuda")
    steps = hf_models.router_logits_of_each_forward(model)  # the model's own, per forward
    recorder = cuda_recorder(model)
    new_tokens = 4
    with torch.no_grad(), moestat_hf.attach(model, recorder):
        model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=new_tokens,
                       min_new_tokens=new_tokens, do_sample=False)
    counts = snapshot_after_the_gpu(recorder).logical_counts
    assert counts.shape[0] == len(steps) == new_tokens
    batch = input_ids.shape[0]
    real_rows = [attention_mask.bool()] + [torch.ones(batch, dtype=torch.bool)] * (new_tokens - 1)
    for step, (router_logits, real) in enumerate(zip(steps, real_rows)):
        np.testing.assert_array_equal(counts[step], hf_models.tally(model, router_logits, real),
                                      err_msg=f"pass {step}")


def inputs_to_capture(model, seed):
    """(input_ids, the attention_mask argument, the real rows) of a batch for a forward
    captured in a CUDA graph, the masks made as a user must make them. transformers builds an
    sdpa mask from a 2-D padding mask on the device when it sees a capture, so an sdpa model
    takes the padded batch's 2-D mask and moestat leaves the padding out inside the graph.
    Eager attention (gpt-oss) copies a host scalar into its mask, which a capture refuses: its
    masks are prepared before the capture, as generate() prepares them for a static cache;
    those do not tell moestat which tokens are padding, so that batch has none."""
    input_ids, attention_mask = hf_models.padded_batch(seed=seed, device="cuda")
    if model.config._attn_implementation != "eager":
        return input_ids, attention_mask, attention_mask.bool()
    from transformers.masking_utils import create_masks_for_generate

    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, hf_models.VOCAB, input_ids.shape, generator=generator).cuda()
    every_token = torch.ones_like(attention_mask)
    masks = create_masks_for_generate(
        config=model.config, attention_mask=every_token, past_key_values=None,
        inputs_embeds=torch.empty((*input_ids.shape, 0), dtype=model.dtype, device="cuda"))
    return input_ids, masks, every_token.bool()


@pytest.mark.parametrize("model_type", ["qwen3_moe", "deepseek_v3", "gpt_oss"])
def test_a_forward_captured_in_a_cuda_graph_records_on_every_replay_while_recording(model_type):
    if model_type not in ARCHITECTURES:
        pytest.skip(f"transformers has no {model_type}")
    # Experts as batched matmuls: the default loop over the hit experts synchronises.
    model = cuda_model(model_type, seed=2, experts_implementation="batched_mm")
    recorder = moestat.CudaRecorder(moestat_hf.topology_from_config(model.config),
                                    window_size=-1)
    static_ids, attention_mask, real = inputs_to_capture(model, seed=2)
    generator = torch.Generator().manual_seed(2)

    def new_tokens():  # padding stays the pad token
        ids = torch.randint(3, hf_models.VOCAB, static_ids.shape, generator=generator)
        return ids.cuda() * real

    # Not output_router_logits=True: ...ForCausalLM's load-balancing loss synchronises.
    router_logits = hf_models.latest_router_logits(model)
    forward = dict(attention_mask=attention_mask, use_cache=False)
    replays = []  # the router logits of each replay
    with torch.no_grad(), moestat_hf.attach(model, recorder):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up (lazy initialisation) off the capture
            for _ in range(2):
                model(static_ids, **forward)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model(static_ids, **forward)
        captured_logits = list(router_logits.values())  # the graph's, rewritten by each replay

        def replay():
            static_ids.copy_(new_tokens())
            graph.replay()
            replays.append([logits.clone() for logits in captured_logits])

        recorder.start()  # from here on replays record; the warm-up and capture did not
        replay()
        replay()
        first = snapshot_after_the_gpu(recorder)
        recorder.stop()
        replay()  # not recorded
        torch.cuda.synchronize()
        recorder.start()  # clears what was recorded
        replay()
        second = snapshot_after_the_gpu(recorder)
    expected = [hf_models.tally(model, logits, real) for logits in replays]
    assert first.logical_counts.shape[0] == 2 and second.logical_counts.shape[0] == 1
    np.testing.assert_array_equal(first.logical_counts[0], expected[0])
    np.testing.assert_array_equal(first.logical_counts[1], expected[1])
    np.testing.assert_array_equal(second.logical_counts[0], expected[3])
    assert first.pass_num_tokens.tolist() == [int(real.sum())] * 2
    assert not np.array_equal(expected[0], expected[1]), "replays must route differently"


@pytest.mark.parametrize("model_type", ["qwen3_moe", "deepseek_v3"])
def test_a_model_compiled_with_reduce_overhead_records_from_its_cuda_graphs(model_type):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = cuda_model(model_type, seed=3, experts_implementation="batched_mm")
    input_ids, attention_mask = hf_models.padded_batch(seed=3, device="cuda")
    calls = hf_models.router_logits_of_each_forward(model)  # kept by hooks compiled in too
    recorder = cuda_recorder(model)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad(), moestat_hf.attach(model, recorder):
        compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)

        def call():
            ids = torch.randint(3, hf_models.VOCAB, input_ids.shape, generator=generator).cuda()
            compiled(ids * attention_mask, attention_mask=attention_mask)
            # The graph's outputs are overwritten by the next replay.
            calls[-1] = [logits.clone() for logits in calls[-1]]

        for _ in range(4):  # warm-up, capture, then replays of the graph
            call()
        first = snapshot_after_the_gpu(recorder)
        recorder.stop()
        call()
        torch.cuda.synchronize()
        recorder.start()  # clears what was recorded
        call()
        second = snapshot_after_the_gpu(recorder)
    assert counters["inductor"]["cudagraph_skips"] == 0, "the model ran in CUDA graphs"
    expected = [hf_models.tally(model, logits, attention_mask.bool()) for logits in calls]
    assert len(calls) == 6, "the hooks kept the router logits of every call"
    assert first.logical_counts.shape[0] == 4 and second.logical_counts.shape[0] == 1
    for call_index in range(4):
        np.testing.assert_array_equal(first.logical_counts[call_index], expected[call_index],
                                      err_msg=f"call {call_index}")
    np.testing.assert_array_equal(second.logical_counts[0], expected[5])


def recorder_kernel_nodes(num_layers, tmp_path):
    """Kernel nodes of moestat's in the graph of one captured forward of a Qwen3-MoE model with
    num_layers MoE layers (from the graph's dump, cudaGraphDebugDotPrint)."""
    model = cuda_model("qwen3_moe", seed=4, num_hidden_layers=num_layers,
                       experts_implementation="batched_mm")
    recorder = cuda_recorder(model)
    input_ids = torch.randint(3, hf_models.VOCAB, (2, 5), device="cuda")
    with torch.no_grad(), moestat_hf.attach(model, recorder):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            model(input_ids, use_cache=False)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph(keep_graph=True)
        graph.enable_debug_mode()
        with torch.cuda.graph(graph):
            model(input_ids, use_cache=False)
        dot_file = tmp_path / f"graph_{num_layers}.dot"
        graph.debug_dump(str(dot_file))
        graph.replay()
        counts = snapshot_after_the_gpu(recorder).logical_counts
    # The warm-up and the replay: each counts every token of every layer.
    assert counts.shape[0] == 2
    moe_layers = len(moestat_hf.find_routers(model))
    assert counts[1].sum() == input_ids.numel() * model.config.num_experts_per_tok * moe_layers
    text = dot_file.read_text()
    starts = [match.start() for match in re.finditer(r'"?\w*node_\d+"?\s*\[', text)]
    nodes = [text[start:end] for start, end in zip(starts, starts[1:] + [len(text)])]
    assert len(nodes) > 10 * num_layers, "the dump lists the model's nodes"
    return sum("moestat" in node for node in nodes)


def test_a_captured_forward_adds_the_same_recorder_nodes_whatever_its_layers(tmp_path):
    # Counting at the pass's end: one kernel for every layer, none between a router and its
    # experts; a node per layer would make the deeper model's graph hold more of them.
    shallow = recorder_kernel_nodes(2, tmp_path)
    deep = recorder_kernel_nodes(6, tmp_path)
    assert 0 < shallow == deep <= 4
