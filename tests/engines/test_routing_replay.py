"""moestat.integrations.transformers_replay (Rollout Routing Replay) on tiny random-weight models
of every supported architecture, on the CPU, with the CUDA parts skipped without a GPU:

- replaying a model's own routes changes nothing (bit for bit), eagerly and compiled;
- replaying other routes uses them, with the weights R3 gives them (reference_weights below,
  written from the paper and each family's router by hand), gradients to the routers equal
  to those of routers written by hand, and the agreement of the routers' own choice counted;
- padding marked invalid keeps the router's own choice and is not checked or counted;
- routes that do not fit the model are refused with a moestat.Error naming the problem;
- a forward captured in a CUDA graph replays the routes set after the capture.

    PYTHONPATH=build/python python -m pytest -q tests/engines/test_routing_replay.py
"""
import copy
import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import moestat
from moestat.integrations import transformers as moestat_hf
from moestat.integrations import transformers_replay

import hf_models

ARCHITECTURES = hf_models.available_architectures()
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


# --- references ---------------------------------------------------------------------------

def reference_weights(model, router, logits, ids):
    """The routing weights [tokens, top_k] R3 gives the experts ids ([tokens, top_k] int64)
    from the router's logits [tokens, experts]: what the family's router computes for the
    experts it picks, computed here for the given ones."""
    model_type = model.config.model_type
    if model_type == "gpt_oss":  # softmax over the chosen experts' logits
        return logits.gather(-1, ids).softmax(dim=-1)
    if model_type == "deepseek_v3":  # sigmoid scores, normalised, scaled
        weights = logits.float().sigmoid().gather(-1, ids)
        if router.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights * router.routed_scaling_factor
    # Softmax over every expert, gathered; Mixtral always renormalises, the others iff
    # norm_topk_prob; Mixtral keeps float32, the others cast back to the logits' dtype.
    weights = logits.float().softmax(dim=-1).gather(-1, ids)
    if model_type == "mixtral" or router.norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights if model_type == "mixtral" else weights.to(logits.dtype)


def hand_written_router(model, router, forced_ids):
    """A forward for router that computes its logits as the family does and routes to
    forced_ids ([tokens, top_k] int64) with reference_weights: the gradient reference."""
    model_type = model.config.model_type

    def forward(hidden_states):
        hidden_states = hidden_states.reshape(-1, router.hidden_dim)
        if model_type == "deepseek_v3":
            logits = F.linear(hidden_states.float(), router.weight.float())
        elif model_type == "gpt_oss":
            logits = F.linear(hidden_states, router.weight, router.bias)
        else:
            logits = F.linear(hidden_states, router.weight)
        return logits, reference_weights(model, router, logits, forced_ids), forced_ids

    return forward


def routed(model, input_ids, **forward):
    """(the model's output, the ids its routers returned as [batch, seq, moe_layers, top_k]
    int64, {MoE layer: its router's (logits, weights, ids)}) of one forward."""
    outputs = {}
    hooks = [router.register_forward_hook(functools.partial(_keep_output, outputs, layer))
             for layer, router in moestat_hf.find_routers(model).items()]
    try:
        output = model(input_ids, **forward)
    finally:
        for hook in hooks:
            hook.remove()
    ids = torch.stack([outputs[layer][2] for layer in sorted(outputs)], dim=1)
    return output, ids.reshape(*input_ids.shape, *ids.shape[1:]), outputs


def _keep_output(outputs, layer, router, args, output):
    outputs[layer] = output


def expected_agreement(model, router_outputs, forced, valid):
    """(per-layer fraction, any-flip fraction, tokens) worked out from the routers' logits:
    the live top-k (hf_models.top_k_from_logits) against forced [tokens, layers, top_k] where
    valid [tokens, layers]."""
    same = []
    for column, layer in enumerate(sorted(router_outputs)):
        live = hf_models.top_k_from_logits(model, layer, router_outputs[layer][0])
        same.append(torch.tensor([set(a) == set(b) for a, b in zip(
            live.tolist(), forced[:, column].tolist())]))
    same = torch.stack(same, dim=1)
    per_layer = {layer: int((same & valid)[:, column].sum()) / int(valid[:, column].sum())
                 for column, layer in enumerate(sorted(router_outputs))}
    counted = int(valid.any(dim=1).sum())
    flipped = int((~same & valid).any(dim=1).sum())
    return per_layer, flipped / counted, counted


def assert_agreement(handle, expected):
    agreement = handle.agreement()
    per_layer, any_flip, tokens = expected
    assert agreement.num_tokens == tokens
    assert agreement.per_layer == per_layer
    assert agreement.any_flip_fraction == any_flip


def other_routes(model_type, input_ids, attention_mask, seed=7, **config_overrides):
    """The routes a model of the same architecture with other weights takes for the batch:
    as a rollout engine's would be, valid ids that the trained model would not all choose."""
    with torch.no_grad():
        _, ids, _ = routed(hf_models.tiny_model(model_type, seed=seed, **config_overrides),
                           input_ids, attention_mask=attention_mask)
    return ids


# --- (a) a model's own routes -------------------------------------------------------------

@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_replaying_the_models_own_routes_changes_nothing(model_type):
    model = hf_models.tiny_model(model_type)
    input_ids, attention_mask = hf_models.padded_batch()
    with torch.no_grad():
        expected, own, _ = routed(model, input_ids, attention_mask=attention_mask)
        with transformers_replay.replay(model, own) as handle:
            assert handle.layers == sorted(moestat_hf.find_routers(model))
            replayed = model(input_ids, attention_mask=attention_mask)
            agreement = handle.agreement()
    assert torch.equal(replayed.logits, expected.logits)
    assert agreement.num_tokens == input_ids.numel()
    assert agreement.any_flip_fraction == 0.0
    assert agreement.per_layer == {layer: 1.0 for layer in handle.layers}
    # Detached, the routers are the class's again.
    assert all("forward" not in router.__dict__
               for router in moestat_hf.find_routers(model).values())


@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_a_model_compiled_with_fullgraph_replays_the_routes_set_between_calls(model_type):
    # Dynamo's graph with eager kernels (aot_eager): compiled code computes what eager code
    # does bit for bit, and an Inductor build of every model would take minutes on 2 cores.
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    # The default eager experts loop over the experts a batch hits: not one graph.
    model = hf_models.tiny_model(model_type, seed=2, experts_implementation="batched_mm")
    input_ids, attention_mask = hf_models.padded_batch(seed=2)
    forced = other_routes(model_type, input_ids, attention_mask,
                          experts_implementation="batched_mm")
    with torch.no_grad():
        expected, own, _ = routed(model, input_ids, attention_mask=attention_mask)
        with transformers_replay.replay(model, forced) as handle:
            eager_forced = model(input_ids, attention_mask=attention_mask).logits
            compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
            handle.set_routes(own)
            replayed_own = compiled(input_ids, attention_mask=attention_mask).logits
            graphs = counters["stats"]["unique_graphs"]
            handle.reset_agreement()
            handle.set_routes(forced)
            replayed_forced = compiled(input_ids, attention_mask=attention_mask).logits
            compiled_agreement = handle.agreement()
            handle.reset_agreement()
            model(input_ids, attention_mask=attention_mask)
            eager_agreement = handle.agreement()
    assert torch.equal(replayed_own, expected.logits)
    assert torch.equal(replayed_forced, eager_forced)
    assert not torch.equal(replayed_forced, expected.logits)
    assert compiled_agreement == eager_agreement
    assert counters["stats"]["unique_graphs"] == graphs, "new routes must not recompile"


def test_a_router_compiled_by_inductor_forces_the_routes():
    # Inductor on one router (seconds, where a whole model takes half a minute on 2 cores):
    # the torch function mode must survive its lowering too.
    torch._dynamo.reset()
    model = hf_models.tiny_model("qwen3_moe", seed=3)
    router = moestat_hf.find_routers(model)[1]
    hidden = torch.randn(2, 5, model.config.hidden_size, generator=torch.Generator().manual_seed(3))
    forced = torch.rand(2, 5, 1, router.num_experts,
                        generator=torch.Generator().manual_seed(4)).argsort(-1)[..., :2]
    with torch.no_grad(), transformers_replay.replay(model, forced):
        eager = router(hidden)
        compiled = torch.compile(router, fullgraph=True)(hidden)
    assert torch.equal(compiled[2], forced.reshape(10, 2))
    assert torch.equal(compiled[2], eager[2])
    torch.testing.assert_close(compiled[1], eager[1])


# --- (b) other routes ---------------------------------------------------------------------

@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_other_routes_are_used_with_the_weights_r3_gives_them(model_type):
    model = hf_models.tiny_model(model_type)
    input_ids, attention_mask = hf_models.padded_batch()
    forced = other_routes(model_type, input_ids, attention_mask)
    with torch.no_grad():
        expected, own, _ = routed(model, input_ids, attention_mask=attention_mask)
        assert not torch.equal(forced, own), "the other model must route differently"
        with transformers_replay.replay(model) as handle:
            handle.set_routes(forced)
            replayed, used, router_outputs = routed(model, input_ids,
                                                    attention_mask=attention_mask)
    assert torch.equal(used, forced)
    routers = moestat_hf.find_routers(model)
    for column, layer in enumerate(handle.layers):
        logits, weights, _ = router_outputs[layer]
        ids = forced[:, :, column].reshape(-1, handle.top_k)
        assert torch.equal(weights, reference_weights(model, routers[layer], logits, ids)), \
            f"layer {layer}"
    assert not torch.equal(replayed.logits, expected.logits)
    tokens = input_ids.numel()
    valid = torch.ones(tokens, len(handle.layers), dtype=torch.bool)
    expected_fractions = expected_agreement(model, router_outputs,
                                            forced.reshape(tokens, *forced.shape[2:]), valid)
    assert_agreement(handle, expected_fractions)
    assert expected_fractions[1] > 0, "some token must flip"
    assert min(expected_fractions[0].values()) < 1


def test_routes_of_any_integer_dtype_and_layout_route_alike():
    model = hf_models.tiny_model("deepseek_v3")
    input_ids, attention_mask = hf_models.padded_batch()
    forced = other_routes("deepseek_v3", input_ids, attention_mask)
    results = []
    with torch.no_grad(), transformers_replay.replay(model) as handle:
        for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64):
            handle.set_routes(forced.to(dtype))
            results.append(model(input_ids, attention_mask=attention_mask).logits)
        handle.set_routes(forced.reshape(-1, *forced.shape[2:]).numpy())  # flattened, numpy
        results.append(model(input_ids, attention_mask=attention_mask).logits)
    assert all(torch.equal(result, results[0]) for result in results)


def test_recording_a_replayed_model_counts_the_replayed_routes():
    model = hf_models.tiny_model("olmoe")
    input_ids, attention_mask = hf_models.padded_batch()
    forced = other_routes("olmoe", input_ids, attention_mask)
    recorder = moestat.CpuRecorder(moestat_hf.topology_from_config(model.config),
                                   window_size=-1)
    recorder.start()
    with torch.no_grad(), transformers_replay.replay(model, forced), \
            moestat_hf.attach(model, recorder):
        model(input_ids, attention_mask=attention_mask)
    counts = recorder.snapshot().logical_counts[0]
    real = forced[attention_mask.bool()]  # [real tokens, layers, top_k]
    for layer in range(model.config.num_hidden_layers):
        np.testing.assert_array_equal(counts[layer], np.bincount(
            real[:, layer].reshape(-1).numpy(), minlength=model.config.num_experts))


# --- (c) gradients ------------------------------------------------------------------------

def router_gradients(model, input_ids, attention_mask):
    model.zero_grad()
    logits = model(input_ids, attention_mask=attention_mask).logits
    (logits.float() * attention_mask[..., None]).pow(2).mean().backward()
    return {layer: router.weight.grad.clone()
            for layer, router in moestat_hf.find_routers(model).items()}


@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_gradients_reach_the_routers_as_through_routers_written_by_hand(model_type):
    model = hf_models.tiny_model(model_type)
    input_ids, attention_mask = hf_models.padded_batch()
    forced = other_routes(model_type, input_ids, attention_mask)
    own = router_gradients(model, input_ids, attention_mask)
    with transformers_replay.replay(model, forced) as handle:
        replayed = router_gradients(model, input_ids, attention_mask)
    # The reference: a copy of the model whose routers are written out by hand.
    by_hand = copy.deepcopy(model)
    for column, (layer, router) in enumerate(sorted(moestat_hf.find_routers(by_hand).items())):
        router.forward = hand_written_router(
            by_hand, router, forced[:, :, column].reshape(-1, handle.top_k))
    reference = router_gradients(by_hand, input_ids, attention_mask)
    for layer, gradient in replayed.items():
        assert gradient.abs().sum() > 0, f"layer {layer}: no gradient"
        assert torch.equal(gradient, reference[layer]), f"layer {layer}"
        assert not torch.equal(gradient, own[layer]), f"layer {layer}: routes not forced"


def test_a_compiled_training_step_gets_the_eager_gradients():
    torch._dynamo.reset()
    model = hf_models.tiny_model("qwen2_moe", seed=5, experts_implementation="batched_mm")
    input_ids, attention_mask = hf_models.padded_batch(seed=5)
    forced = other_routes("qwen2_moe", input_ids, attention_mask, seed=6,
                          experts_implementation="batched_mm")
    with transformers_replay.replay(model, forced):
        eager = router_gradients(model, input_ids, attention_mask)
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
        traced = router_gradients(compiled, input_ids, attention_mask)
    for layer in eager:
        assert torch.equal(traced[layer], eager[layer]), f"layer {layer}"


# --- (f) padding --------------------------------------------------------------------------

@pytest.mark.parametrize("model_type", ["mixtral", "deepseek_v3", "gpt_oss"])
def test_routes_marked_invalid_keep_the_routers_choice_and_are_not_counted(model_type):
    if model_type not in ARCHITECTURES:
        pytest.skip(f"transformers has no {model_type}")
    model = hf_models.tiny_model(model_type)
    input_ids, attention_mask = hf_models.padded_batch()  # left padding
    real = attention_mask.bool()
    forced = other_routes(model_type, input_ids, attention_mask)
    # Padding carries what no route can be (a rollout engine writes -1 or leaves garbage).
    garbage = forced.to(torch.int16).masked_fill(~real[..., None, None], -1)
    with torch.no_grad(), transformers_replay.replay(model) as handle:
        handle.set_routes(garbage, valid=real)
        replayed, used, router_outputs = routed(model, input_ids, attention_mask=attention_mask)
        agreement = handle.agreement()
    # Real tokens take the routes; padding the router's own choice.
    assert torch.equal(used[real], forced[real])
    tokens = input_ids.numel()
    for column, layer in enumerate(handle.layers):
        live = hf_models.top_k_from_logits(model, layer, router_outputs[layer][0])
        padding = ~real.reshape(-1)
        # As sets: DeepSeek-V3's top-k is unsorted.
        assert torch.equal(used.reshape(tokens, -1, handle.top_k)[padding, column].sort().values,
                           live[padding].sort().values)
    assert agreement.num_tokens == int(real.sum())
    assert_agreement(handle, expected_agreement(
        model, router_outputs, forced.reshape(tokens, *forced.shape[2:]),
        real.reshape(-1, 1).expand(-1, len(handle.layers))))
    # The same as routing the padding as the routers route it, marked valid.
    with torch.no_grad(), transformers_replay.replay(model) as handle:
        handle.set_routes(torch.where(real[..., None, None], forced, used))
        assert torch.equal(model(input_ids, attention_mask=attention_mask).logits,
                           replayed.logits)


def test_a_route_invalid_in_one_layer_keeps_the_routers_choice_there_alone():
    model = hf_models.tiny_model("qwen2_moe")
    input_ids, attention_mask = hf_models.padded_batch()
    forced = other_routes("qwen2_moe", input_ids, attention_mask)
    valid = torch.ones(forced.shape[:-1], dtype=torch.bool)
    valid[0, -1, 0] = False  # the first row's last token, first MoE layer
    with torch.no_grad(), transformers_replay.replay(model, forced, valid) as handle:
        _, used, router_outputs = routed(model, input_ids, attention_mask=attention_mask)
    first_layer = handle.layers[0]
    live = hf_models.top_k_from_logits(model, first_layer, router_outputs[first_layer][0])
    assert torch.equal(used[0, -1, 0].sort().values, live[input_ids.shape[1] - 1].sort().values)
    assert torch.equal(used[valid], forced[valid])
    assert handle.agreement().num_tokens == input_ids.numel()


# --- (e) routes that do not fit -----------------------------------------------------------

def deepseek_routes():
    """A DeepSeek-V3 model (3 MoE layers of 8 experts, top-3; decoder layers 1-3), its
    padded batch and routes of the right shape: [3, 7, 3, 3] int64."""
    model = hf_models.tiny_model("deepseek_v3")
    input_ids, attention_mask = hf_models.padded_batch()
    routes = torch.rand(3, 7, 3, 8, generator=torch.Generator().manual_seed(0)).argsort(-1)
    return model, input_ids, attention_mask, routes[..., :3]


def with_entry(routes, index, value):
    routes = routes.clone()
    routes[index] = value
    return routes


@pytest.mark.parametrize("make_routes, valid, message", [
    (lambda r: r[0, 0], None, r"ids must be \[batch, seq, moe_layers, top_k\] or \[tokens, "
                              r"moe_layers, top_k\], got shape \(3, 3\)"),
    (lambda r: r.reshape(-1), None, r"ids must be .*, got shape \(189,\)"),
    (lambda r: torch.cat([r, r[:, :, :1]], dim=2), None,
     r"ids have 4 MoE-layer columns \(dimension 2\), the model has 3 MoE layers \(decoder "
     r"layers \[1, 2, 3\]\); routes over every decoder layer: select ids\[..., handle.layers"),
    (lambda r: r[..., :2], None, r"ids have top-k 2 \(last dimension\), the model's routers "
                                 r"pick 3"),
    (lambda r: with_entry(r, (1, 2, 0, 1), 8), None,
     r"expert id 8 out of range \[0, 8\) at ids\[1, 2, 0\] \(decoder layer 1\): \[\d, 8, \d\]"),
    (lambda r: with_entry(r, (2, 6, 2, 0), -1).to(torch.int16), None,
     r"expert id -1 out of range \[0, 8\) at ids\[2, 6, 2\] \(decoder layer 3\)"),
    (lambda r: with_entry(r, (0, 3, 1, 2), 300).to(torch.int32).reshape(21, 3, 3), None,
     r"expert id 300 out of range \[0, 8\) at ids\[3, 1\] \(decoder layer 2\)"),
    (lambda r: r.float(), None, r"ids must be an integer tensor \(expert ids\), got "
                                r"torch.float32"),
    (lambda r: r.bool(), None, r"ids must be an integer tensor"),
    (lambda r: with_entry(r, (2, 1, 1), torch.tensor([5, 0, 5])), None,
     r"expert 5 twice in the top-k at ids\[2, 1, 1\] \(decoder layer 2\): \[5, 0, 5\]"),
    (lambda r: r.tolist(), None, r"ids must be a torch.Tensor or numpy array, got list"),
    (lambda r: r, torch.ones(3, 7, 3, dtype=torch.int64),
     r"valid must be a bool tensor, got torch.int64 \(for a mask of 0 and 1: valid=mask != 0\)"),
    (lambda r: r, torch.ones(3, 6, dtype=torch.bool),
     r"valid has shape \(3, 6\), ids \(3, 7, 3, 3\): valid must be \(3, 7, 3\) \(per token "
     r"and layer\) or \(3, 7\) \(per token\)"),
])
def test_routes_that_do_not_fit_the_model_are_refused_by_name(make_routes, valid, message):
    model, _, _, routes = deepseek_routes()
    with transformers_replay.replay(model) as handle:
        with pytest.raises(moestat.Error, match=f"^routes: {message}"):
            handle.set_routes(make_routes(routes), valid)
    # replay() with routes that do not fit leaves the model as it was.
    with pytest.raises(moestat.Error, match="^routes: "):
        transformers_replay.replay(model, make_routes(routes), valid)
    assert all("forward" not in router.__dict__
               for router in moestat_hf.find_routers(model).values())


def test_routes_that_do_not_fit_the_forward_are_refused_before_it_runs():
    model, input_ids, attention_mask, routes = deepseek_routes()
    with torch.no_grad(), transformers_replay.replay(model) as handle:
        with pytest.raises(moestat.Error, match=r"^replay: no routes set: call "
                                                r"handle.set_routes\(ids\) before the forward"):
            model(input_ids, attention_mask=attention_mask)
        handle.set_routes(routes)
        with pytest.raises(moestat.Error, match=r"routes are for \[batch, seq\] = \[3, 7\], "
                                                r"the forward's input is \[3, 6\]"):
            model(input_ids[:, 1:], attention_mask=attention_mask[:, 1:])
        with pytest.raises(moestat.Error, match=r"routes are for \[batch, seq\] = \[3, 7\], "
                                                r"the forward's input is \[7, 3\]"):
            model(input_ids.reshape(7, 3))
        handle.set_routes(routes.reshape(-1, 3, 3)[:20])
        with pytest.raises(moestat.Error, match=r"the routes have 20 tokens, the forward's "
                                                r"input \[3, 7\] has 21"):
            model(input_ids, attention_mask=attention_mask)
        with pytest.raises(moestat.Error, match=r"the router saw 21 tokens, the routes set "
                                                r"have 20"):
            model.model(input_ids, attention_mask=attention_mask)  # past the model's check
        handle.set_routes(routes.reshape(-1, 3, 3))  # flattened: any [batch, seq] of 21 tokens
        model(input_ids.reshape(7, 3))
        with pytest.raises(moestat.Error, match=r"decoder layer 1's router is already "
                                                r"replayed \(detach that handle first\)"):
            transformers_replay.replay(model)


def test_a_model_without_a_known_router_is_refused_by_name():
    import transformers

    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, vocab_size=hf_models.VOCAB)
    with pytest.raises(moestat.Error, match="LlamaForCausalLM: no MoE router"):
        transformers_replay.replay(transformers.LlamaForCausalLM(config))


# --- (d) CUDA graphs ----------------------------------------------------------------------

def gpu_inputs(model, seed):
    """(input_ids, attention_mask argument, valid [batch, seq] bool) for a captured forward:
    the padded batch and its 2-D mask for sdpa attention; for eager attention (gpt-oss, which
    copies a host scalar into a mask it builds) a batch without padding and the masks
    prepared before the capture (docs/transformers.md)."""
    input_ids, attention_mask = hf_models.padded_batch(seed=seed, device="cuda")
    if model.config._attn_implementation != "eager":
        return input_ids, attention_mask, attention_mask.bool()
    from transformers.masking_utils import create_masks_for_generate

    every_token = torch.ones_like(attention_mask)
    masks = create_masks_for_generate(
        config=model.config, attention_mask=every_token, past_key_values=None,
        inputs_embeds=torch.empty((*input_ids.shape, 0), dtype=model.dtype, device="cuda"))
    input_ids = torch.randint(3, hf_models.VOCAB, input_ids.shape,
                              generator=torch.Generator().manual_seed(seed)).cuda()
    return input_ids, masks, every_token.bool()


def random_routes(shape, num_experts, top_k, seed):
    """[*shape, top_k] distinct random expert ids, uint8."""
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, num_experts, generator=generator).argsort(-1)[..., :top_k].to(
        torch.uint8)


@needs_gpu
@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_in_bf16_on_a_gpu_own_routes_change_nothing_and_others_train_the_routers(model_type):
    model = hf_models.tiny_model(model_type).to("cuda", torch.bfloat16)
    input_ids, attention_mask = hf_models.padded_batch(device="cuda")
    with torch.no_grad():
        expected, own, _ = routed(model, input_ids, attention_mask=attention_mask)
        with transformers_replay.replay(model, own):
            assert torch.equal(model(input_ids, attention_mask=attention_mask).logits,
                               expected.logits)
    forced = other_routes(model_type, input_ids.cpu(), attention_mask.cpu())
    with transformers_replay.replay(model, forced, attention_mask.bool()) as handle:
        gradients = router_gradients(model, input_ids, attention_mask)
        assert handle.agreement().num_tokens == int(attention_mask.sum())
        _, used, _ = routed(model, input_ids, attention_mask=attention_mask)
    real = attention_mask.bool()
    assert torch.equal(used[real].cpu(), forced[real.cpu()])
    assert all(gradient.abs().sum() > 0 for gradient in gradients.values())


@needs_gpu
@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_a_forward_captured_in_a_cuda_graph_replays_the_routes_set_after_the_capture(
        model_type):
    # float32 and experts as batched matmuls: the default loop over the hit experts
    # synchronises; in float32 the graph and eager forwards compute the same bits.
    model = hf_models.tiny_model(model_type, seed=8, experts_implementation="batched_mm").cuda()
    input_ids, attention_mask, valid = gpu_inputs(model, seed=8)
    forward = dict(attention_mask=attention_mask, use_cache=False)
    with torch.no_grad():
        _, own, _ = routed(model, input_ids, **forward)
    with torch.no_grad(), transformers_replay.replay(model) as handle:
        shape = (*input_ids.shape, len(handle.layers))
        routes = [random_routes(shape, handle.num_experts, handle.top_k, seed)
                  for seed in range(3)]
        handle.set_routes(routes[0].cuda(), valid)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up (lazy initialisation) off the capture
            for _ in range(2):
                model(input_ids, **forward)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = model(input_ids, **forward).logits
        for routes_now in [routes[1], routes[2], own]:
            handle.set_routes(routes_now, valid)  # from the host, into the captured buffers
            handle.reset_agreement()
            graph.replay()
            from_graph = captured.clone()
            in_graph = handle.agreement()
            handle.reset_agreement()
            eager = model(input_ids, **forward).logits
            assert torch.equal(from_graph, eager)
            assert handle.agreement() == in_graph
        assert in_graph.any_flip_fraction == 0.0, "the model's own routes, the last"


@needs_gpu
def test_a_model_compiled_with_reduce_overhead_replays_the_routes_set_between_calls():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = hf_models.tiny_model("qwen3_moe", seed=9, experts_implementation="batched_mm").cuda()
    input_ids, attention_mask = hf_models.padded_batch(seed=9, device="cuda")
    with torch.no_grad(), transformers_replay.replay(model) as handle:
        compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
        shape = (*input_ids.shape, len(handle.layers))
        for seed in range(5):  # warm-up, capture, then replays of the graph
            routes = random_routes(shape, handle.num_experts, handle.top_k, seed)
            handle.set_routes(routes, attention_mask.bool())
            output = compiled(input_ids, attention_mask=attention_mask).logits.clone()
            _, used, _ = routed(model, input_ids, attention_mask=attention_mask)
            eager = model(input_ids, attention_mask=attention_mask).logits
            real = attention_mask.bool()
            assert torch.equal(used[real].cpu(), routes[real.cpu()].long())
            torch.testing.assert_close(output, eager, rtol=1e-4, atol=1e-5)
    # The routes and agreement buffers are static inputs: read and written inside the graphs.
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
