#!/usr/bin/env python3
"""Writes a tiny qwen3moe model whose routing is known from its weights alone, for the test of
moestat reading the counts that llama.cpp's llama-imatrix writes (llama_imatrix_test.cpp).

    imatrix_probe_gguf.py OUT.gguf EXPECTED.json [--layers N] [--experts E] [--top-k K]

Every token has the same embedding v, and every attention output and expert down projection is
zero, so each layer's hidden state stays v whatever the tokens and the router of layer l ranks
the experts by W_l v (RMS norms with unit weights only scale it; softmax keeps the order): every
token is routed to the top-k of W_l v. EXPECTED.json holds those experts per layer, computed
here from the weights. The vocabulary and model keys are tiny_moe_gguf.py's.
"""

import argparse
import json
import sys

import numpy as np

import tiny_moe_gguf as tiny

# The k-th and (k+1)-th router logits differ by at least this much, far above float32 error.
MIN_MARGIN = 0.05


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("expected")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    gguf = tiny.gguf
    embed, heads, kv_heads = tiny.EMBED, tiny.HEADS, tiny.KV_HEADS
    head_dim = embed // heads
    writer = gguf.GGUFWriter(args.out, "qwen3moe")
    writer.add_block_count(args.layers)
    writer.add_context_length(tiny.CONTEXT)
    writer.add_embedding_length(embed)
    writer.add_feed_forward_length(tiny.FEED_FORWARD)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_expert_count(args.experts)
    writer.add_expert_used_count(args.top_k)
    writer.add_expert_feed_forward_length(tiny.EXPERT_FEED_FORWARD)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    vocabulary = tiny.write_vocabulary(writer)

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def zeros(*shape):
        return np.zeros(shape, dtype=np.float32)

    ones = lambda n: np.ones(n, dtype=np.float32)  # noqa: E731 (norm weights)
    v = normal(embed)
    writer.add_tensor("token_embd.weight", np.tile(v, (vocabulary, 1)))
    writer.add_tensor("output_norm.weight", ones(embed))
    writer.add_tensor("output.weight", normal(vocabulary, embed) * 0.1)
    expected = []
    for layer in range(args.layers):
        block = f"blk.{layer}."
        router = normal(args.experts, embed)
        logits = router.astype(np.float64) @ v.astype(np.float64)
        order = np.argsort(-logits)
        margin = logits[order[args.top_k - 1]] - logits[order[args.top_k]]
        if margin < MIN_MARGIN:
            sys.exit(f"layer {layer}: top-k margin {margin:.4f} too small; pick another --seed")
        expected.append(sorted(int(e) for e in order[: args.top_k]))
        writer.add_tensor(block + "attn_norm.weight", ones(embed))
        writer.add_tensor(block + "attn_q.weight", normal(heads * head_dim, embed) * 0.1)
        writer.add_tensor(block + "attn_k.weight", normal(kv_heads * head_dim, embed) * 0.1)
        writer.add_tensor(block + "attn_v.weight", normal(kv_heads * head_dim, embed) * 0.1)
        writer.add_tensor(block + "attn_output.weight", zeros(embed, heads * head_dim))
        writer.add_tensor(block + "attn_q_norm.weight", ones(head_dim))
        writer.add_tensor(block + "attn_k_norm.weight", ones(head_dim))
        writer.add_tensor(block + "ffn_norm.weight", ones(embed))
        writer.add_tensor(block + "ffn_gate_inp.weight", router)
        for name in ("ffn_gate_exps", "ffn_up_exps"):
            writer.add_tensor(block + name + ".weight",
                              normal(args.experts, tiny.EXPERT_FEED_FORWARD, embed) * 0.1)
        writer.add_tensor(block + "ffn_down_exps.weight",
                          zeros(args.experts, embed, tiny.EXPERT_FEED_FORWARD))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with open(args.expected, "w") as out:
        json.dump({"experts": expected}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
