"""python -m moestat.record_hf: record a Hugging Face transformers MoE model's routing.

Loads a model from a local directory or the Hugging Face hub (--model, with its weights and
tokenizer) or builds one with random weights from a config (--config: a config.json or a
directory holding one), runs prompts through generate() with moestat attached, and writes
into --out:

- the SGLang stat dump (expert_distribution_recorder_*.pt, as SGLang's recorder names it),
- logical_count.json ({"logical_count": [passes][layers][experts]}),
- report.html, drawn by the moestat CLI (`moestat report`; --moestat-cli PATH); without the
  CLI it says so on stderr, with the command that draws it later,

and prints a summary: passes, tokens, balancedness of the identity placement, hottest experts.

    python -m moestat.record_hf --model ./Qwen3-30B-A3B --prompts-file prompts.txt --out rec
    python -m moestat.record_hf --config config.json --layers 4 --random-prompts 8 --out rec
"""

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig

import numpy as np

import moestat

# torch, transformers and the modules that need them are imported by main() after the
# arguments are parsed (import_engines), so that --help and argument errors neither wait for
# torch nor need it.
torch = None
transformers = None
make_recorder = None
moestat_hf = None

PROG = "python -m moestat.record_hf"
ERROR = "record_hf: error: "

EPILOG = """\
needs torch and transformers 5.x (not for --help).
exit status: 0 recorded; 1 torch or transformers missing, or the report could not be drawn;
2 bad arguments, a model or config that cannot be loaded (a path that is not there, a hub id
that cannot be reached), a device torch lacks, or a model moestat refuses (moestat.Error:
not a Mixture-of-Experts model it knows)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", metavar="DIR_OR_HUB_ID",
                        help="a local model directory (weights and tokenizer), or a Hugging "
                             "Face hub id that transformers downloads")
    source.add_argument("--config", type=pathlib.Path, metavar="PATH",
                        help="a config.json (or its directory): the model built from it with "
                             "random weights, no tokenizer")
    parser.add_argument("--layers", type=int, metavar="N",
                        help="keep only the first N decoder layers (default: all)")
    prompts = parser.add_mutually_exclusive_group()
    prompts.add_argument("--prompt", action="append", metavar="TEXT",
                         help="a prompt's text (repeatable; needs --model's tokenizer)")
    prompts.add_argument("--prompts-file", type=pathlib.Path, metavar="PATH",
                         help="a text file of prompts, one per line (needs --model's tokenizer)")
    prompts.add_argument("--random-prompts", type=int, metavar="N",
                         help="N prompts of random token ids (the default: 8, when no prompt "
                              "text is given)")
    parser.add_argument("--prompt-length", type=int, default=32, metavar="TOKENS",
                        help="tokens per random prompt (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=8, metavar="N",
                        help="prompts per generate() call; each call records a prefill pass "
                             "and one pass per decode step (default: %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=16, metavar="N",
                        help="tokens generate() adds to each prompt, greedily "
                             "(default: %(default)s)")
    parser.add_argument("--device", default="auto",
                        help="where the model runs and moestat records: cpu, cuda or cuda:N "
                             "(default: %(default)s, cuda when torch sees a GPU, else cpu)")
    parser.add_argument("--dtype", default="bfloat16",
                        choices=["bfloat16", "float16", "float32"],
                        help="the model's dtype (default: %(default)s)")
    parser.add_argument("--gpus", type=int, default=8, metavar="N",
                        help="GPUs of the identity placement the summary and the report judge "
                             "(default: %(default)s)")
    parser.add_argument("--out", type=pathlib.Path, required=True, metavar="DIR",
                        help="the folder to write into (made when missing; required)")
    parser.add_argument("--moestat-cli", metavar="PATH",
                        help="the moestat CLI that draws report.html (default: moestat on "
                             "PATH, else in this Python's scripts folder)")
    parser.add_argument("--seed", type=int, default=0, metavar="N",
                        help="seed of the random weights (--config) and of the random prompts "
                             "(default: %(default)s)")
    return parser


def parse_arguments(argv):
    return build_parser().parse_args(argv)


class InputError(Exception):
    """A model, config or prompt that cannot be used: exit status 2."""


def one_line(error: BaseException) -> str:
    """The error's message on one line (transformers' messages span several)."""
    return " ".join(str(error).split()) or type(error).__name__


def import_engines():
    """Imports torch, transformers and moestat's integration into this module's globals;
    raises ImportError naming the package missing."""
    global torch, transformers, make_recorder, moestat_hf
    import torch as torch_module
    import transformers as transformers_module

    from moestat.engines.devices import make_recorder as make_recorder_function
    from moestat.integrations import transformers as integration

    torch, transformers = torch_module, transformers_module
    make_recorder, moestat_hf = make_recorder_function, integration


def resolve_device(device: str) -> str:
    """--device as torch names it; InputError for a device torch does not know or lacks."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        kind = torch.device(device).type
    except RuntimeError as error:
        raise InputError(f"--device {device}: {one_line(error)}") from error
    if kind == "cuda" and not torch.cuda.is_available():
        raise InputError(f"--device {device}: torch sees no CUDA GPU (use --device cpu)")
    return device


def looks_like_a_path(name: str) -> bool:
    """Whether --model names a local path rather than a hub id ("org/name")."""
    return (name.startswith((".", "/", "~")) or name.count("/") > 1
            or (os.sep != "/" and os.sep in name))


def load_config(arguments):
    """The model's config, with --layers applied; InputError when it cannot be loaded or is
    not an MoE model moestat knows."""
    overrides = {} if arguments.layers is None else {"num_hidden_layers": arguments.layers}
    if arguments.model is not None:
        option, source = "--model", arguments.model
        if not pathlib.Path(source).expanduser().exists() and looks_like_a_path(source):
            raise InputError(f"--model {source}: no such directory")
        source = str(pathlib.Path(source).expanduser()) if looks_like_a_path(source) else source
    else:
        option, source = "--config", arguments.config
        if not source.exists():
            raise InputError(f"--config {source}: no such file or directory")
    try:
        config = transformers.AutoConfig.from_pretrained(source, **overrides)
    except (OSError, ValueError) as error:
        raise InputError(f"{option} {source}: {one_line(error)}") from error
    try:  # a model that is not an MoE model moestat knows: refused before any weight loads
        moestat_hf.topology_from_config(config)
    except moestat.Error as error:
        raise InputError(f"{option} {source}: {one_line(error)}") from error
    return config


def load_model(arguments, config):
    """(model in eval mode on the device, its tokenizer or None)."""
    dtype = getattr(torch, arguments.dtype)
    if arguments.model is not None:
        source = arguments.model
        source = str(pathlib.Path(source).expanduser()) if looks_like_a_path(source) else source
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(source, config=config,
                                                                      dtype=dtype)
            tokenizer = transformers.AutoTokenizer.from_pretrained(source, padding_side="left")
        except (OSError, ValueError) as error:
            raise InputError(f"--model {source}: {one_line(error)}") from error
    else:
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
            raise InputError("prompts as text need a tokenizer: use --model, or "
                             "--random-prompts")
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
    config = load_config(arguments)
    model, tokenizer = load_model(arguments, config)
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


def find_cli(arguments):
    """The moestat CLI: --moestat-cli, else moestat on PATH, else the one pip installed
    beside this Python (its scripts folder, which need not be on PATH); None without."""
    if arguments.moestat_cli:
        return arguments.moestat_cli
    found = shutil.which("moestat")
    if found is None:
        found = shutil.which("moestat", path=sysconfig.get_path("scripts"))
    return found


def report_command(arguments, counts_path: pathlib.Path, cli: str = "moestat") -> list:
    return [cli, "report", str(counts_path), "--gpus", str(arguments.gpus),
            "--html", str(arguments.out / "report.html")]


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
    cli = find_cli(arguments)
    if cli is None:
        # The report is drawn by the CLI only (the package has no report drawing).
        command = " ".join(report_command(arguments, counts_path))
        print(f"record_hf: report.html not drawn: no moestat CLI on PATH (--moestat-cli "
              f"names one); draw it later with: {command}", file=sys.stderr)
        return written
    try:
        result = subprocess.run(report_command(arguments, counts_path, cli),
                                capture_output=True, text=True)
    except OSError as error:
        raise ReportError(f"--moestat-cli {cli}: {one_line(error)}") from error
    if result.returncode != 0:
        raise ReportError(f"{cli} report failed: {one_line(result.stderr)}")
    written.append(out / "report.html")
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


def check_arguments(parser, arguments):
    """The checks that need neither torch nor the model (argparse's errors: exit status 2)."""
    if arguments.config is not None and (arguments.prompt or arguments.prompts_file):
        parser.error("prompts as text need --model's tokenizer: with --config, use "
                     "--random-prompts")
    if arguments.prompts_file is not None and not arguments.prompts_file.is_file():
        parser.error(f"--prompts-file {arguments.prompts_file}: no such file")
    for name in ("layers", "random_prompts", "prompt_length", "batch_size", "gpus"):
        value = getattr(arguments, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, not {value}")
    if arguments.max_new_tokens < 0:
        parser.error(f"--max-new-tokens must not be negative, not {arguments.max_new_tokens}")


class ReportError(Exception):
    """The moestat CLI could not draw the report: exit status 1."""


def main(argv=None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(sys.argv[1:] if argv is None else argv)
    check_arguments(parser, arguments)
    try:
        import_engines()
    except ImportError as error:
        missing = error.name or one_line(error)
        print(f"{ERROR}{missing} is not installed: recording a transformers model needs torch "
              f"and transformers 5.x (pip install torch transformers)", file=sys.stderr)
        return 1
    try:
        arguments.device = resolve_device(arguments.device)
        snapshot, topology = record(arguments)
        written = write_outputs(arguments, snapshot)
    except (InputError, moestat.Error) as error:
        print(ERROR + one_line(error), file=sys.stderr)
        return 2
    except ReportError as error:
        print(ERROR + one_line(error), file=sys.stderr)
        return 1
    print(summary(snapshot, topology, arguments.gpus))
    print("wrote:        " + ", ".join(str(path) for path in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
