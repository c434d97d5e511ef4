"""moestat.integrations.transformers on tiny random-weight models of every supported
architecture, on the CPU: the recorded counts equal a tally of the model's own router
outputs, per layer, for a padded batch, for generate() and for a model compiled with
torch.compile(fullgraph=True)."""
import sys

import numpy as np
import pytest
import torch

import moestat
from moestat import torch_ops
from moestat.integrations import transformers as moestat_hf

import hf_models

ARCHITECTURES = hf_models.available_architectures()


def recorder_for(model):
    recorder = moestat.CpuRecorder(moestat_hf.topology_from_config(model.config), window_size=-1)
    recorder.start()
    return recorder


@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_a_padded_batch_is_counted_as_the_routers_route_its_real_tokens(model_type):
    model = hf_models.tiny_model(model_type)
    input_ids, attention_mask = hf_models.padded_batch()
    forwards = hf_models.router_logits_of_each_forward(model)  # the model's own
    recorder = recorder_for(model)
    with torch.no_grad(), moestat_hf.attach(model, recorder):
        model(input_ids, attention_mask=attention_mask)
    counts = recorder.snapshot().logical_counts
    assert counts.shape[0] == len(forwards) == 1, "one forward, one pass"
    expected = hf_models.tally(model, forwards[0], attention_mask.bool())
    np.testing.assert_array_equal(counts[0], expected)
    # Dense layers get nothing, every real token is counted top-k times in each MoE layer,
    # and the padding would have changed the counts.
    moe = np.array(recorder.topology.moe_layers)
    assert not counts[0][~moe].any()
    top_k = recorder.topology.top_k
    assert (counts[0][moe].sum(axis=1) == int(attention_mask.sum()) * top_k).all()
    with_padding = hf_models.tally(model, forwards[0], torch.ones_like(attention_mask))
    assert not np.array_equal(with_padding, expected)


# transformers prepares the masks itself when generate() runs with a static cache (a 4-D mask,
# or a dict of them by layer type as for gpt-oss), and so must a user capturing a model with
# eager attention in a CUDA graph (docs/transformers.md).
@pytest.mark.parametrize("model_type", [name for name in ("qwen3_moe", "gpt_oss")
                                        if name in ARCHITECTURES])
def test_with_a_prepared_mask_which_does_not_tell_padding_every_token_counts(model_type):
    from transformers.masking_utils import create_masks_for_generate

    model = hf_models.tiny_model(model_type)
    input_ids, attention_mask = hf_models.padded_batch()
    masks = create_masks_for_generate(
        config=model.config, attention_mask=attention_mask, past_key_values=None,
        inputs_embeds=torch.empty((*input_ids.shape, 0), dtype=model.dtype))
    assert isinstance(masks, dict) == (model_type == "gpt_oss")
    router_logits = hf_models.latest_router_logits(model)
    recorder = recorder_for(model)
    with torch.no_grad(), moestat_hf.attach(model, recorder):
        model(input_ids, attention_mask=masks)
    counts = recorder.snapshot().logical_counts
    np.testing.assert_array_equal(counts[0], hf_models.tally(
        model, list(router_logits.values()), torch.ones_like(attention_mask, dtype=torch.bool)))


def test_an_eager_forward_records_without_the_custom_op_dispatcher():
    # The dispatcher's Python layers for a custom op cost an eager forward several times the
    # recording itself (moestat.torch_ops): outside torch.compile the hooks call the recorder.
    model = hf_models.tiny_model("mixtral")
    input_ids, attention_mask = hf_models.padded_batch()
    recorder = recorder_for(model)
    with torch.no_grad(), moestat_hf.attach(model, recorder), torch.profiler.profile() as trace:
        model(input_ids, attention_mask=attention_mask)
    assert not [event.name for event in trace.events() if event.name.startswith("moestat::")]
    assert recorder.snapshot().logical_counts.sum() == int(attention_mask.sum()) * 2 * 4


@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_generate_records_the_prefill_and_every_decode_step_as_passes(model_type):
    model = hf_models.tiny_model(model_type, seed=1)
    input_ids, attention_mask = hf_models.padded_batch(seed=1)
    steps = hf_models.router_logits_of_each_forward(model)  # the model's own, per forward
    recorder = recorder_for(model)
    new_tokens = 4
    with torch.no_grad(), moestat_hf.attach(model, recorder):
        model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=new_tokens,
                       min_new_tokens=new_tokens, do_sample=False)
    snapshot = recorder.snapshot()
    assert len(steps) == new_tokens, "a prefill and a decode step for each token after the first"
    assert snapshot.logical_counts.shape[0] == new_tokens
    batch = input_ids.shape[0]
    # The prefill's real tokens are the prompts'; every decode step's token is real.
    real_rows = [attention_mask.bool()] + [torch.ones(batch, dtype=torch.bool)] * (new_tokens - 1)
    for step, (router_logits, real) in enumerate(zip(steps, real_rows)):
        np.testing.assert_array_equal(snapshot.logical_counts[step],
                                      hf_models.tally(model, router_logits, real),
                                      err_msg=f"pass {step}")
    assert snapshot.pass_num_tokens.tolist() == [int(attention_mask.sum())] + [batch] * (
        new_tokens - 1)


# Inductor on one model (the ops must survive its graph rewriting); Dynamo's graph with eager
# kernels on the other, whose inductor build would take a minute of CI on 2 cores.
@pytest.mark.parametrize("model_type, backend", [("qwen3_moe", "inductor"),
                                                 ("deepseek_v3", "aot_eager")])
def test_a_model_compiled_with_fullgraph_records_what_it_routes(model_type, backend):
    torch._dynamo.reset()
    # The default eager experts loop over the experts a batch hits, which cannot be one graph.
    model = hf_models.tiny_model(model_type, seed=2, experts_implementation="batched_mm")
    input_ids, attention_mask = hf_models.padded_batch(seed=2)
    calls = hf_models.router_logits_of_each_forward(model)  # kept by hooks compiled in too
    recorder = recorder_for(model)
    with torch.no_grad(), moestat_hf.attach(model, recorder):
        compiled = torch.compile(model, fullgraph=True, backend=backend)  # a graph break raises
        for _ in range(2):
            compiled(input_ids, attention_mask=attention_mask)
    counts = recorder.snapshot().logical_counts
    assert counts.shape[0] == len(calls) == 2, "each call of the compiled model is a pass"
    for call, router_logits in enumerate(calls):
        np.testing.assert_array_equal(
            counts[call], hf_models.tally(model, router_logits, attention_mask.bool()))


def test_detach_stops_recording_and_the_context_manager_detaches():
    model = hf_models.tiny_model("mixtral")
    input_ids, attention_mask = hf_models.padded_batch()
    recorder = recorder_for(model)
    handle = moestat_hf.attach(model, recorder)
    assert handle.layers == [0, 1, 2, 3]
    with torch.no_grad():
        model(input_ids, attention_mask=attention_mask)
        handle.detach()
        model(input_ids, attention_mask=attention_mask)
        with moestat_hf.attach(model, recorder):
            model(input_ids, attention_mask=attention_mask)
        model(input_ids, attention_mask=attention_mask)
    assert recorder.snapshot().logical_counts.shape[0] == 2


def test_a_forward_that_raises_before_its_last_moe_layer_is_discarded_and_the_next_records():
    model = hf_models.tiny_model("olmoe")
    recorder = recorder_for(model)
    input_ids, attention_mask = hf_models.padded_batch()
    routers = hf_models.routers_by_layer(model)
    last_layer = max(routers)
    with torch.no_grad(), moestat_hf.attach(model, recorder):
        def fail(*args):
            raise RuntimeError("router failed")

        # The last MoE layer's router raises: the layers before it were counted (kept) in
        # the pass.
        failing = routers[last_layer].register_forward_pre_hook(fail)
        with pytest.raises(RuntimeError, match="router failed"):
            model(input_ids, attention_mask=attention_mask)
        failing.remove()
        forwards = hf_models.router_logits_of_each_forward(model)
        model(input_ids, attention_mask=attention_mask)
        # A forward that fails after its last MoE layer has routed every token: its pass
        # is whole, and recorded.
        failing = model.lm_head.register_forward_hook(fail)
        with pytest.raises(RuntimeError, match="router failed"):
            model(input_ids, attention_mask=attention_mask)
        failing.remove()
    counts = recorder.snapshot().logical_counts
    assert counts.shape[0] == 2, "the forward that raised in a MoE layer is no pass"
    for forward in range(2):
        np.testing.assert_array_equal(
            counts[forward], hf_models.tally(model, forwards[forward], attention_mask.bool()))


def test_topology_from_config_marks_the_dense_layers():
    deepseek = moestat_hf.topology_from_config(hf_models.tiny_config("deepseek_v3"), ep_size=2)
    assert deepseek.moe_layers == [False, True, True, True]
    assert (deepseek.num_logical_experts, deepseek.top_k, deepseek.ep_size) == (8, 3, 2)
    qwen = moestat_hf.topology_from_config(hf_models.tiny_config("qwen3_moe"))
    assert qwen.moe_layers == [False, True, False, False]
    mixtral = moestat_hf.topology_from_config(hf_models.tiny_config("mixtral"))
    assert mixtral.moe_layers == [True] * 4 and mixtral.num_logical_experts == 6


def test_a_model_without_a_known_router_is_refused_by_name():
    import transformers

    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, vocab_size=hf_models.VOCAB)
    model = transformers.LlamaForCausalLM(config)
    recorder = moestat.CpuRecorder(moestat.ModelTopology.uniform(2, 8, 2))
    with pytest.raises(moestat.Error, match="LlamaForCausalLM: no MoE router"):
        moestat_hf.attach(model, recorder)


# What a pip-installed moestat meets on an older transformers: DeepSeek-V3's router returned
# its logits alone before 5.13.0, and before 5.0.0 no family had a router module.
@pytest.mark.parametrize("model_type, version, needed", [
    ("deepseek_v3", "5.12.1", "5.13.0"), ("deepseek_v3", "4.57.1", "5.13.0"),
    ("mixtral", "4.57.1", "5.0.0"), ("qwen3_moe", "5.0.0.dev0", None),
    ("deepseek_v3", "5.13.0", None)])
def test_an_older_transformers_is_refused_with_the_version_needed(model_type, version, needed,
                                                                   monkeypatch):
    model = hf_models.tiny_model(model_type)
    recorder = recorder_for(model)
    # The module as imported now: building a model may put a new one in sys.modules.
    monkeypatch.setattr(sys.modules["transformers"], "__version__", version)
    if needed is None:
        moestat_hf.attach(model, recorder).detach()
        return
    with pytest.raises(moestat.Error, match=rf"transformers {version} is too old for moestat: "
                                            rf".* from transformers {needed} on"):
        moestat_hf.attach(model, recorder)
    with pytest.raises(moestat.Error, match=rf"transformers>={needed}"):
        moestat_hf.find_routers(model)


def test_a_recorder_whose_topology_does_not_fit_is_refused():
    model = hf_models.tiny_model("qwen3_moe")
    wrong_layers = moestat.CpuRecorder(moestat.ModelTopology.uniform(4, 8, 2))
    with pytest.raises(moestat.Error, match=r"routers in decoder layers \[1\]"):
        moestat_hf.attach(model, wrong_layers)
    wrong_top_k = moestat.CpuRecorder(moestat.ModelTopology(4, 8, 3, moe_layers=[False, True,
                                                                                 False, False]))
    with pytest.raises(moestat.Error, match="top_k=2"):
        moestat_hf.attach(model, wrong_top_k)


@pytest.mark.parametrize("max_kept_bytes", [torch_ops.MAX_KEPT_BYTES, 40])
def test_kept_layers_are_counted_when_the_valid_count_changes_or_too_many_bytes_are_kept(
        monkeypatch, max_kept_bytes):
    # Three layers of 3 tokens' top-2 int64 ids (48 bytes each); the first two share one
    # valid-token count, the third has another. With 40 bytes kept at most, every layer is
    # counted as it comes; otherwise the change of count counts the first two early.
    monkeypatch.setattr(torch_ops, "MAX_KEPT_BYTES", max_kept_bytes)
    recorder = moestat.CpuRecorder(moestat.ModelTopology.uniform(3, 8, 2), window_size=-1)
    recorder.start()
    recorder_id = torch_ops.register(recorder)
    token = torch_ops.ordering_token("cpu")
    ids = [torch.tensor([[0, 1], [2, 3], [4, 5]]), torch.tensor([[1, 2], [3, 4], [5, 6]]),
           torch.tensor([[7, 6], [5, 4], [3, 2]])]
    valid = [torch.tensor([2]), None, torch.tensor([3])]
    valid[1] = valid[0]
    torch_ops.begin_pass(token, recorder_id)
    for layer in range(3):
        torch_ops.record_topk(token, recorder_id, layer, ids[layer], valid[layer])
    torch_ops.end_pass(token, recorder_id)
    torch_ops.unregister(recorder_id)
    counts = recorder.snapshot().logical_counts
    expected = np.stack([np.bincount(ids[layer][:int(valid[layer])].reshape(-1), minlength=8)
                         for layer in range(3)])
    assert counts.shape[0] == 1
    np.testing.assert_array_equal(counts[0], expected)
