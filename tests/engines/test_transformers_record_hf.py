"""python -m moestat.record_hf on a tiny random-weight model built from a config.json: the
SGLang dump and logical_count.json it writes hold every pass, each MoE layer counting top-k
experts per token, and the report is drawn when the moestat CLI is there, or said not drawn
with a command that draws it; a model that cannot be loaded or is not an MoE model is one line
on stderr (issue 42, item 6)."""
import os
import pathlib
import shlex
import subprocess
import sys

import numpy as np
import pytest
import transformers

import moestat
from moestat import record_hf

import hf_models

# The CLI next to the package in the build tree (build/moestat beside build/python).
BUILD_TREE_CLI = pathlib.Path(moestat.__file__).parents[2] / "moestat"


def test_record_hf_writes_the_dump_the_counts_and_the_report(tmp_path, capsys):
    hf_models.tiny_config("qwen3_moe").save_pretrained(tmp_path / "model")
    arguments = ["--config", str(tmp_path / "model"), "--device", "cpu", "--dtype", "float32",
                 "--random-prompts", "5", "--batch-size", "3", "--prompt-length", "6",
                 "--max-new-tokens", "3", "--gpus", "2", "--out", str(tmp_path / "out")]
    if BUILD_TREE_CLI.is_file():
        arguments += ["--moestat-cli", str(BUILD_TREE_CLI)]
    assert record_hf.main(arguments) == 0

    out = tmp_path / "out"
    counts = moestat.read_logical_counts(out / "logical_count.json")
    dumps = list(out.glob("expert_distribution_recorder_*.pt"))
    assert len(dumps) == 1
    np.testing.assert_array_equal(moestat.read_logical_counts(dumps[0]).sum(axis=0),
                                  counts.sum(axis=0))
    # Two batches (3 and 2 prompts) of a prefill and two decode steps each.
    assert counts.shape == (6, 4, 8)
    tokens_per_pass = np.array([3 * 6, 3, 3, 2 * 6, 2, 2])
    moe_layer = 1  # decoder_sparse_step=2, layer 3 dense
    np.testing.assert_array_equal(counts[:, moe_layer].sum(axis=1), tokens_per_pass * 2)
    assert not counts[:, [0, 2, 3]].any()
    assert (out / "report.html").is_file() == BUILD_TREE_CLI.is_file()
    assert "passes:       6 (40 tokens)" in capsys.readouterr().out


def test_record_hf_without_the_cli_says_how_to_draw_the_report(tmp_path, capsys, monkeypatch):
    hf_models.tiny_config("qwen3_moe").save_pretrained(tmp_path / "model")
    monkeypatch.setattr(record_hf.shutil, "which", lambda *args, **kwargs: None)
    out = tmp_path / "out"
    assert record_hf.main(["--config", str(tmp_path / "model"), "--device", "cpu",
                           "--dtype", "float32", "--random-prompts", "2", "--prompt-length",
                           "4", "--max-new-tokens", "1", "--gpus", "2", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert not (out / "report.html").exists()
    assert "report.html" not in captured.out
    note = [line for line in captured.err.splitlines() if line.startswith("record_hf: ")]
    assert len(note) == 1
    assert note[0].startswith("record_hf: report.html not drawn: no moestat CLI on PATH")
    command = shlex.split(note[0].partition("draw it later with: ")[2])
    assert command == ["moestat", "report", str(out / "logical_count.json"), "--gpus", "2",
                       "--html", str(out / "report.html")]
    if not BUILD_TREE_CLI.is_file():
        pytest.skip("no moestat CLI in the build tree to run the command with")
    subprocess.run([str(BUILD_TREE_CLI)] + command[1:], check=True, capture_output=True)
    assert (out / "report.html").is_file()


def error_line(stdout: str, stderr: str) -> str:
    """The one line a refused run prints (on stderr; nothing on stdout)."""
    assert stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("record_hf: error: ")
    return lines[0]


def test_record_hf_refuses_a_config_that_is_not_moe_in_one_line(tmp_path, capsys):
    transformers.AutoConfig.for_model(
        "llama", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, vocab_size=128,
    ).save_pretrained(tmp_path / "llama")
    out = tmp_path / "out"
    assert record_hf.main(["--config", str(tmp_path / "llama"), "--device", "cpu",
                           "--out", str(out)]) == 2
    line = error_line(*capsys.readouterr())
    assert line == (f"record_hf: error: --config {tmp_path / 'llama'}: LlamaConfig has none of "
                    "n_routed_experts, num_local_experts, num_experts: not an MoE config?")
    assert not out.exists()


def test_record_hf_refuses_a_missing_model_directory_in_one_line(tmp_path, capsys):
    missing = tmp_path / "no-such-model"
    assert record_hf.main(["--model", str(missing), "--out", str(tmp_path / "out")]) == 2
    assert (error_line(*capsys.readouterr())
            == f"record_hf: error: --model {missing}: no such directory")


def test_record_hf_refuses_a_hub_id_it_cannot_reach_in_one_line(tmp_path):
    # Offline, the hub cannot be reached, as without a network (where huggingface_hub retries
    # for about 30 s first); a process of its own, since huggingface_hub reads the variable
    # when imported.
    environment = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf-home"))
    result = subprocess.run(
        [sys.executable, "-m", "moestat.record_hf", "--model", "moestat-tests/no-such-moe",
         "--device", "cpu", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, env=environment, timeout=120)
    assert result.returncode == 2
    line = error_line(result.stdout, result.stderr)
    assert line.startswith("record_hf: error: --model moestat-tests/no-such-moe: ")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()
