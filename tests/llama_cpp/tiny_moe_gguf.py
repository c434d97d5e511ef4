#!/usr/bin/env python3
"""Writes tiny random-weight MoE models as GGUF files that llama.cpp loads, for the tests that
run real llama.cpp (tests/llama_cpp).

    tiny_moe_gguf.py ARCH OUT.gguf [--layers N] [--experts E] [--top-k K] [--seed S]
        [--embed D --heads H --kv-heads H --head-dim D --expert-ff F --ff F --type T]

ARCH is qwen3moe (routed experts only) or qwen2moe (routed experts plus a gated shared
expert). The files are written with llama.cpp's own `gguf` package, from the llama.cpp sources
scripts/setup_llama_cpp.sh unpacks (put its gguf-py on PYTHONPATH): the key and tensor names
are then those of the llama.cpp the tests run. Weights are float32 from a seeded generator, the
router's scaled up so tokens spread over the experts. The vocabulary is a SentencePiece one of
the 256 byte tokens plus <unk>, <s> and </s>: any text tokenizes (byte fallback), and
llama-imatrix, which fails on a model without a vocabulary, runs on it.

The shape options make larger models for benchmarks (bench/llama_cpp_bench.sh writes
Qwen3-30B-A3B's layer shape: --embed 2048 --heads 32 --kv-heads 4 --head-dim 128 --experts 128
--top-k 8 --expert-ff 768 --type q4_0). --type q4_0 or q8_0 stores the expert and attention
matrices as random quantised blocks (a fixed scale, random quants: drawn directly, no float
matrix is made or quantised), as a quantised model's are laid out, scaled so that each matrix keeps its input's
variance; norms, the router, the
embeddings and the output stay float32.
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
    parser.add_argument("--embed", type=int, default=EMBED)
    parser.add_argument("--heads", type=int, default=HEADS)
    parser.add_argument("--kv-heads", type=int, default=KV_HEADS)
    parser.add_argument("--head-dim", type=int, help="default: embed / heads")
    parser.add_argument("--expert-ff", type=int, default=EXPERT_FEED_FORWARD)
    parser.add_argument("--ff", type=int, default=FEED_FORWARD)
    parser.add_argument("--context", type=int, default=CONTEXT)
    parser.add_argument("--type", choices=["f32", "q4_0", "q8_0"], default="f32",
                        help="of the expert and attention matrices (default f32)")
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    EMBED_ = args.embed  # noqa: N806 (the module's constants, as given)
    HEADS_, KV_HEADS_ = args.heads, args.kv_heads  # noqa: N806
    EXPERT_FF = args.expert_ff  # noqa: N806

    def weight(*shape, scale=0.1):
        # numpy shapes are ggml's ne reversed: [n_expert, n_out, n_in] for ne {n_in, n_out, n_expert}
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def matrix(*shape):
        """A weight matrix of --type: float32, or random blocks of 32 quants along n_in."""
        if args.type == "f32":
            return weight(*shape)
        qtype = getattr(gguf.GGMLQuantizationType, args.type.upper())
        block, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        *rows, n_in = shape
        # Quants of mean zero: q4_0's nibbles 1..15 (-7..7 once 8 is taken off), q8_0's
        # -127..127, so that no matrix adds the same direction to every token's state.
        if qtype == gguf.GGMLQuantizationType.Q4_0:
            low = rng.integers(1, 16, size=(*rows, n_in // block, 16), dtype=np.uint8)
            high = rng.integers(1, 16, size=low.shape, dtype=np.uint8)
            quants = low | (high << 4)
        else:
            quants = rng.integers(-127, 128, size=(*rows, n_in // block, 32),
                                  dtype=np.int8).view(np.uint8)
        blocks = np.empty((*rows, n_in // block, block_bytes), dtype=np.uint8)
        blocks[..., 2:] = quants
        # A scale that gives outputs of about unit variance: random quants are uniform, of
        # standard deviation about 4.3 (q4_0's) or 73 (q8_0's).
        spread = 4.3 if qtype == gguf.GGMLQuantizationType.Q4_0 else 73.0
        scale = np.float16(1.0 / (spread * np.sqrt(n_in)))
        blocks[..., :2] = np.frombuffer(scale.tobytes(), np.uint8)
        return blocks.reshape(*rows, n_in // block * block_bytes), qtype

    def add_matrix(name, *shape):
        data = matrix(*shape)
        if isinstance(data, tuple):
            writer.add_tensor(name, data[0], raw_dtype=data[1])
        else:
            writer.add_tensor(name, data)

    head_dim = args.head_dim or EMBED_ // HEADS_
    writer = gguf.GGUFWriter(args.out, args.arch)
    writer.add_block_count(args.layers)
    writer.add_context_length(args.context)
    writer.add_embedding_length(EMBED_)
    writer.add_feed_forward_length(args.ff)
    writer.add_head_count(HEADS_)
    writer.add_head_count_kv(KV_HEADS_)
    if args.head_dim:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_expert_count(args.experts)
    writer.add_expert_used_count(args.top_k)
    writer.add_expert_feed_forward_length(EXPERT_FF)
    if args.arch == "qwen2moe":
        writer.add_expert_shared_feed_forward_length(SHARED_FEED_FORWARD)
    writer.add_file_type({"f32": gguf.LlamaFileType.ALL_F32, "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
                          "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[args.type])
    vocabulary = write_vocabulary(writer)

    ones = lambda n: np.ones(n, dtype=np.float32)  # noqa: E731 (norm weights)
    writer.add_tensor("token_embd.weight", weight(vocabulary, EMBED_, scale=1.0))
    writer.add_tensor("output_norm.weight", ones(EMBED_))
    writer.add_tensor("output.weight", weight(vocabulary, EMBED_))
    for layer in range(args.layers):
        block = f"blk.{layer}."
        writer.add_tensor(block + "attn_norm.weight", ones(EMBED_))
        add_matrix(block + "attn_q.weight", HEADS_ * head_dim, EMBED_)
        add_matrix(block + "attn_k.weight", KV_HEADS_ * head_dim, EMBED_)
        add_matrix(block + "attn_v.weight", KV_HEADS_ * head_dim, EMBED_)
        add_matrix(block + "attn_output.weight", EMBED_, HEADS_ * head_dim)
        if args.arch == "qwen3moe":
            writer.add_tensor(block + "attn_q_norm.weight", ones(head_dim))
            writer.add_tensor(block + "attn_k_norm.weight", ones(head_dim))
        writer.add_tensor(block + "ffn_norm.weight", ones(EMBED_))
        writer.add_tensor(block + "ffn_gate_inp.weight", weight(args.experts, EMBED_, scale=1.0))
        for name in ("ffn_gate_exps", "ffn_up_exps"):
            add_matrix(block + name + ".weight", args.experts, EXPERT_FF, EMBED_)
        add_matrix(block + "ffn_down_exps.weight", args.experts, EMBED_, EXPERT_FF)
        if args.arch == "qwen2moe":
            writer.add_tensor(block + "ffn_gate_inp_shexp.weight", weight(EMBED_))
            writer.add_tensor(block + "ffn_gate_shexp.weight", weight(SHARED_FEED_FORWARD, EMBED_))
            writer.add_tensor(block + "ffn_up_shexp.weight", weight(SHARED_FEED_FORWARD, EMBED_))
            writer.add_tensor(block + "ffn_down_shexp.weight", weight(EMBED_, SHARED_FEED_FORWARD))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
