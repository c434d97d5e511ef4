"""python -m moestat.record_hf: record a Hugging Face transformers MoE model's routing.

Loads a model from a local directory (--model, with its weights and tokenizer) or builds one
with random weights from a config (--config: a config.json or a directory holding one), runs
prompts through generate() with moestat attached, and writes into --out:

- the SGLang stat dump (expert_distribution_recorder_*.pt, as SGLang's recorder names it),
- logical_count.json ({"logical_count": [passes][layers][experts]}),
- report.html, when the moestat CLI is found (`moestat report`; --moestat-cli PATH),

and prints a summary: passes, tokens, balancedness of the identity placement, hottest experts.

    python -m moestat.record_hf --model ./Qwen3-30B-A3B --prompts-file prompts.txt --out rec
    python -m moestat.record_hf --config config.json --layers 4 --random-prompts 8 --out rec
"""

import argparse
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import torch
import transformers

import moestat
from moestat.engines.devices import make_recorder
from moestat.integrations import transformers as moestat_hf


def parse_arguments(argv):
    parser = argparse.ArgumentParser(prog="python -m moestat.record_hf", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", type=pathlib.Path, help="a local model directory")
    source.add_argument("--config", type=pathlib.Path,
                        help="a config.json (or its directory): random weights")
    parser.add_argument("--layers", type=int, help="keep only this many decoder layers")
    prompts = parser.add_mutually_exclusive_group()
    prompts.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    prompts.add_argument("--prompts-file", type=pathlib.Path, help="one prompt per line")
    prompts.add_argument("--random-prompts", type=int,
                         help="this many prompts of random tokens (the default: 8 without a "
                              "tokenizer)")
    parser.add_argument("--prompt-length", type=int, default=32,
                        help="tokens per random prompt (default 32)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16",
                        choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--gpus", type=int, default=8,
                        help="GPUs of the identity placement the summary and report judge")
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--moestat-cli", help="the moestat CLI (default: moestat on PATH)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def load_model(arguments):
    """(model in eval mode on the device, its tokenizer or None)."""
    dtype = getattr(torch, arguments.dtype)
    overrides = {} if arguments.layers is None else {"num_hidden_layers": arguments.layers}
    if arguments.model is not None:
        model = transformers.AutoModelForCausalLM.from_pretrained(arguments.model, dtype=dtype,
                                                                  **overrides)
        tokenizer = transformers.AutoTokenizer.from_pretrained(arguments.model,
                                                               padding_side="left")
    else:
        config = transformers.AutoConfig.from_pretrained(arguments.config, **overrides)
        torch.manual_seed(arguments.seed)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
        tokenizer = None
    return model.to(arguments.device).eval(), tokenizer


def prompt_batches(arguments, model, tokenizer):
    """Yields (input_ids, attention_mask) batches, left-padded, on the model's device."""
    texts = arguments.prompt
    if arguments.prompts_file is not None:
        texts = [line for line in arguments.prompts_file.read_text().splitlines() if line]
    if texts is not None:
        if tokenizer is None:
            raise SystemExit("prompts as text need a tokenizer: use --model, or --random-prompts")
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        for start in range(0, len(texts), arguments.batch_size):
            batch = tokenizer(texts[start:start + arguments.batch_size], return_tensors="pt",
                              padding=True)
            yield batch.input_ids.to(model.device), batch.attention_mask.to(model.device)
        return
    count = arguments.random_prompts or 8
    generator = torch.Generator().manual_seed(arguments.seed)
    for start in range(0, count, arguments.batch_size):
        rows = min(arguments.batch_size, count - start)
        ids = torch.randint(0, model.config.get_text_config().vocab_size,
                            (rows, arguments.prompt_length), generator=generator)
        yield ids.to(model.device), torch.ones_like(ids, device=model.device)


def record(arguments):
    """(the snapshot of every pass, the model's topology)."""
    model, tokenizer = load_model(arguments)
    recorder = make_recorder(moestat_hf.topology_from_config(model.config), arguments.device,
                             window_size=-1)
    recorder.start()
    pad_token_id = tokenizer.pad_token_id if tokenizer is not None else 0
    with torch.no_grad(), moestat_hf.attach(model, recorder):
        for input_ids, attention_mask in prompt_batches(arguments, model, tokenizer):
            model.generate(input_ids, attention_mask=attention_mask, do_sample=False,
                           max_new_tokens=arguments.max_new_tokens, pad_token_id=pad_token_id)
    if torch.device(arguments.device).type == "cuda":
        torch.cuda.synchronize()
    return recorder.snapshot(), recorder.topology


def write_outputs(arguments, snapshot: moestat.Snapshot) -> list:
    """Writes the dump, the counts and (with the CLI) the report; returns their paths."""
    out = arguments.out
    out.mkdir(parents=True, exist_ok=True)
    identity = moestat.Placement.trivial(snapshot.num_layers, snapshot.num_physical_experts,
                                         snapshot.num_logical_experts)
    written = [pathlib.Path(moestat.write_sglang_dump(snapshot, identity, 0, out))]
    counts_path = out / "logical_count.json"
    moestat.write_logical_counts(counts_path, snapshot.logical_counts)
    written.append(counts_path)
    cli = arguments.moestat_cli or shutil.which("moestat")
    if cli is not None:
        report = out / "report.html"
        result = subprocess.run([cli, "report", str(counts_path), "--gpus", str(arguments.gpus),
                                 "--html", str(report)], capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"{cli} report failed: {result.stderr.strip()}")
        written.append(report)
    return written


def summary(snapshot: moestat.Snapshot, topology: moestat.ModelTopology, gpus: int) -> str:
    loads = snapshot.logical_counts.sum(axis=0)
    identity = moestat.Placement.trivial(topology.num_layers, topology.num_physical_experts,
                                         topology.num_logical_experts)
    balance = moestat.evaluate_placement(loads, identity, gpus)
    moe_layers = [layer for layer, moe in enumerate(topology.moe_layers) if moe]
    hottest = ", ".join(f"{layer}:{int(np.argmax(loads[layer]))}" for layer in moe_layers[:8])
    return "\n".join([
        f"passes:       {snapshot.num_passes} "
        f"({int(snapshot.pass_num_tokens.sum())} tokens)",
        f"MoE layers:   {len(moe_layers)} of {topology.num_layers}, "
        f"{topology.num_logical_experts} experts, top-{topology.top_k}",
        f"balancedness: {balance['balancedness']:.4f} (identity placement on {gpus} GPUs; "
        f"worst layer {balance['worst_layer']} at {balance['worst_balancedness']:.4f})",
        f"expert gini:  {moestat.expert_gini(loads):.4f}",
        f"hottest expert per layer (layer:expert): {hottest}"
        + (" ..." if len(moe_layers) > 8 else ""),
    ])


def main(argv=None) -> int:
    arguments = parse_arguments(sys.argv[1:] if argv is None else argv)
    snapshot, topology = record(arguments)
    written = write_outputs(arguments, snapshot)
    print(summary(snapshot, topology, arguments.gpus))
    print("wrote:        " + ", ".join(str(path) for path in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
