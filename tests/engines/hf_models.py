"""Tiny random-weight transformers MoE models, and the routing each of them computes, worked
out here from the logits the model's own routers return (taken by forward hooks on them), so
that the engine tests can check moestat's counts against an independent tally."""
import functools

import numpy as np
import torch
import transformers

VOCAB = 128

# Every architecture at hidden size 32, 4 decoder layers; the routing parameters chosen so
# that each one's particular rules matter (dense layers, grouped routing, router bias).
ARCHITECTURES = {
    "mixtral": dict(num_local_experts=6, num_experts_per_tok=2),
    # Layers 1 and 3 are MoE (decoder_sparse_step=2), layer 3 made dense by mlp_only_layers.
    "qwen3_moe": dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                      decoder_sparse_step=2, mlp_only_layers=[3], head_dim=8),
    # The first layer dense; 8 experts in 4 groups, tokens routed within the best 2 groups.
    "deepseek_v3": dict(n_routed_experts=8, num_experts_per_tok=3, moe_intermediate_size=32,
                        first_k_dense_replace=1, n_group=4, topk_group=2, n_shared_experts=1,
                        num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=16,
                        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8),
    "olmoe": dict(num_experts=8, num_experts_per_tok=2),
    # Every other layer MoE, with a shared expert beside the routed ones.
    "qwen2_moe": dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                      shared_expert_intermediate_size=32, decoder_sparse_step=2),
    "gpt_oss": dict(num_local_experts=4, num_experts_per_tok=2, head_dim=8),
}


def available_architectures():
    """The architectures of ARCHITECTURES the installed transformers has."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return [name for name in ARCHITECTURES if name in CONFIG_MAPPING_NAMES]


def tiny_config(model_type: str, **overrides):
    arguments = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                     num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                     max_position_embeddings=256, pad_token_id=0, bos_token_id=1,
                     eos_token_id=2)
    arguments.update(ARCHITECTURES[model_type])
    arguments.update(overrides)
    return transformers.AutoConfig.for_model(model_type, **arguments)


def tiny_model(model_type: str, seed: int = 0, **config_overrides):
    """A model of the architecture with random weights, in eval mode, on the CPU."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(model_type,
                                                                      **config_overrides))
    for router in routers_by_layer(model).values():
        bias = getattr(router, "e_score_correction_bias", None)
        if bias is not None:
            # Zero after init; random, it changes which experts win, as in a trained model.
            bias.copy_(torch.rand_like(bias) * 0.2)
    return model.eval()


def routers_by_layer(model):
    """{decoder layer: its router module}, found by the layer's mlp's gate or router."""
    routers = {}
    for layer, decoder_layer in enumerate(model.model.layers):
        router = getattr(decoder_layer.mlp, "gate", None) or getattr(decoder_layer.mlp, "router",
                                                                     None)
        if isinstance(router, torch.nn.Module) and hasattr(router, "top_k"):
            routers[layer] = router
    return routers


def latest_router_logits(model) -> dict:
    """{MoE layer: the logits its router returned in the model's latest forward}, in layer
    order, kept current by forward hooks on the routers. The same tensors as
    output_router_logits=True, without the load-balancing loss ...ForCausalLM computes with
    them, which fails on prepared masks and copies to the host (a CUDA graph capture refuses)."""
    logits = {}
    for layer, router in routers_by_layer(model).items():
        logits[layer] = None
        router.register_forward_hook(functools.partial(_keep_router_logits, logits, layer))
    return logits


def router_logits_of_each_forward(model) -> list:
    """A list that gets, for every forward of model (each pass of generate()), its routers'
    logits in layer order, taken from the routers themselves by forward hooks. Not the
    router_logits a forward returns when asked (output_router_logits=True): not every
    transformers version returns them for every family (DeepSeek-V3 on 5.17 does not), and
    asked for them, ...ForCausalLM computes its load-balancing loss, which fails on decode
    steps and copies to the host."""
    steps = []
    routers = routers_by_layer(model)
    model.register_forward_pre_hook(lambda module, args: steps.append([None] * len(routers)))
    for column, layer in enumerate(sorted(routers)):
        routers[layer].register_forward_hook(functools.partial(_keep_step_logits, steps, column))
    return steps


def _keep_router_logits(logits, layer, router, args, output):
    logits[layer] = output[0]


def _keep_step_logits(steps, column, router, args, output):
    steps[-1][column] = output[0]


def top_k_from_logits(model, layer: int, logits: torch.Tensor) -> torch.Tensor:
    """The experts the layer's router picks for each row of its logits [tokens, experts],
    worked out in the dtypes the router uses (in bf16, ties are common: the same ops on the
    same values break them the same way).

    Mixtral, Qwen-MoE and OLMoE pick the top-k of the softmax in float32; gpt-oss the top-k
    of its logits (which include its router bias). DeepSeek-V3 scores experts by sigmoid
    plus a correction bias, ranks groups of experts by the sum of their two best scores, and
    picks the top-k among the experts of the best topk_group groups."""
    router = routers_by_layer(model)[layer]
    config = model.config
    if config.model_type == "gpt_oss":
        return logits.topk(router.top_k, dim=-1).indices
    if config.model_type != "deepseek_v3":
        return logits.softmax(dim=-1, dtype=torch.float32).topk(router.top_k, dim=-1).indices
    scores = logits.float().sigmoid() + router.e_score_correction_bias.float()
    grouped = scores.view(scores.shape[0], config.n_group, -1)
    group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
    best_groups = group_scores.topk(config.topk_group, dim=-1).indices
    allowed = torch.zeros_like(group_scores, dtype=torch.bool)
    allowed.scatter_(1, best_groups, True)
    allowed = allowed.unsqueeze(-1).expand_as(grouped).reshape_as(scores)
    return scores.masked_fill(~allowed, float("-inf")).topk(router.top_k, dim=-1).indices


def tally(model, router_logits, real_rows: torch.Tensor) -> np.ndarray:
    """[layers, experts] int64: how often each expert is picked for the real rows
    ([tokens] bool) given the model's router logits (one [tokens, experts] per MoE layer)."""
    moe_layers = sorted(routers_by_layer(model))
    assert len(router_logits) == len(moe_layers), "one router output per MoE layer"
    num_experts = router_logits[0].shape[-1]
    counts = np.zeros((model.config.num_hidden_layers, num_experts), dtype=np.int64)
    for layer, logits in zip(moe_layers, router_logits):
        picked = top_k_from_logits(model, layer, logits)[real_rows.reshape(-1).to(logits.device)]
        counts[layer] = np.bincount(picked.reshape(-1).cpu().numpy(), minlength=num_experts)
    return counts


def padded_batch(seed: int = 0, lengths=(7, 4, 6), device="cpu"):
    """(input_ids, attention_mask) of len(lengths) prompts left-padded to the longest, as
    generate() wants them."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    input_ids = torch.zeros(len(lengths), width, dtype=torch.long)
    attention_mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        input_ids[row, width - length:] = torch.randint(3, VOCAB, (length,), generator=generator)
        attention_mask[row, width - length:] = 1
    return input_ids.to(device), attention_mask.to(device)
