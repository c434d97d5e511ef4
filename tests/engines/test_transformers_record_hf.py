"""python -m moestat.record_hf on a tiny random-weight model built from a config.json: the
SGLang dump and logical_count.json it writes hold every pass, each MoE layer counting top-k
experts per token, and the report is drawn when the moestat CLI is there."""
import pathlib

import numpy as np

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
