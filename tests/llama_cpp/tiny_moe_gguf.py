#!/usr/bin/env python3
"""Writes tiny random-weight MoE models as GGUF files that llama.cpp loads, for the tests that
run real llama.cpp (tests/llama_cpp).

    tiny_moe_gguf.py ARCH OUT.gguf [--layers N] [--experts E] [--top-k K] [--seed S]

ARCH is qwen3moe (routed experts only) or qwen2moe (routed experts plus a gated shared
expert). The files are written with llama.cpp's own `gguf` package, from the llama.cpp sources
scripts/setup_llama_cpp.sh unpacks (put its gguf-py on PYTHONPATH): the key and tensor names
are then those of the llama.cpp the tests run. Weights are float32 from a seeded generator, the
router's scaled up so tokens spread over the experts. The vocabulary is a SentencePiece one of
the 256 byte tokens plus <unk>, <s> and </s>: any text tokenizes (byte fallback), and
llama-imatrix, which fails on a model without a vocabulary, runs on it.
"""

import argparse
import sys

import gguf
import numpy as np

EMBED = 64
HEADS = 4
KV_HEADS = 2
FEED_FORWARD = 64
EXPERT_FEED_FORWARD = 32
SHARED_FEED_FORWARD = 48
CONTEXT = 512


def write_vocabulary(writer):
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{byte:02X}>" for byte in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    return len(tokens)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arch", choices=["qwen3moe", "qwen2moe"])
    parser.add_argument("out")
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)

    def weight(*shape, scale=0.1):
        # numpy shapes are ggml's ne reversed: [n_expert, n_out, n_in] for ne {n_in, n_out, n_expert}
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    head_dim = EMBED // HEADS
    writer = gguf.GGUFWriter(args.out, args.arch)
    writer.add_block_count(args.layers)
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(EMBED)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_expert_count(args.experts)
    writer.add_expert_used_count(args.top_k)
    writer.add_expert_feed_forward_length(EXPERT_FEED_FORWARD)
    if args.arch == "qwen2moe":
        writer.add_expert_shared_feed_forward_length(SHARED_FEED_FORWARD)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    vocabulary = write_vocabulary(writer)

    ones = lambda n: np.ones(n, dtype=np.float32)  # noqa: E731 (norm weights)
    writer.add_tensor("token_embd.weight", weight(vocabulary, EMBED, scale=1.0))
    writer.add_tensor("output_norm.weight", ones(EMBED))
    writer.add_tensor("output.weight", weight(vocabulary, EMBED))
    for layer in range(args.layers):
        block = f"blk.{layer}."
        writer.add_tensor(block + "attn_norm.weight", ones(EMBED))
        writer.add_tensor(block + "attn_q.weight", weight(HEADS * head_dim, EMBED))
        writer.add_tensor(block + "attn_k.weight", weight(KV_HEADS * head_dim, EMBED))
        writer.add_tensor(block + "attn_v.weight", weight(KV_HEADS * head_dim, EMBED))
        writer.add_tensor(block + "attn_output.weight", weight(EMBED, HEADS * head_dim))
        if args.arch == "qwen3moe":
            writer.add_tensor(block + "attn_q_norm.weight", ones(head_dim))
            writer.add_tensor(block + "attn_k_norm.weight", ones(head_dim))
        writer.add_tensor(block + "ffn_norm.weight", ones(EMBED))
        writer.add_tensor(block + "ffn_gate_inp.weight", weight(args.experts, EMBED, scale=1.0))
        for name in ("ffn_gate_exps", "ffn_up_exps"):
            writer.add_tensor(block + name + ".weight",
                              weight(args.experts, EXPERT_FEED_FORWARD, EMBED))
        writer.add_tensor(block + "ffn_down_exps.weight",
                          weight(args.experts, EMBED, EXPERT_FEED_FORWARD))
        if args.arch == "qwen2moe":
            writer.add_tensor(block + "ffn_gate_inp_shexp.weight", weight(EMBED))
            writer.add_tensor(block + "ffn_gate_shexp.weight", weight(SHARED_FEED_FORWARD, EMBED))
            writer.add_tensor(block + "ffn_up_shexp.weight", weight(SHARED_FEED_FORWARD, EMBED))
            writer.add_tensor(block + "ffn_down_shexp.weight", weight(EMBED, SHARED_FEED_FORWARD))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
