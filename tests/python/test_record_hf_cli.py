"""python -m moestat.record_hf without torch or transformers (issue 42, item 6): --help and
argument errors parse before they are imported, every option has a help text with its
default, and a missing torch or transformers is one line saying what to install. Each run is
a Python in which importing torch or transformers fails, whether or not they are installed.
The recording itself is tested in tests/engines/test_transformers_record_hf.py."""
import argparse
import os
import subprocess
import sys

import pytest

from moestat import record_hf

# Runs `python -m moestat.record_hf ARGS` with torch and transformers hidden: a finder ahead
# of every other one refuses them, as an environment without them would.
WITHOUT_TORCH = """
import runpy, sys

class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "transformers"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Hide())
sys.argv[0] = "record_hf"
try:
    runpy.run_module("moestat.record_hf", run_name="__main__", alter_sys=True)
finally:
    imported = sorted(n for n in sys.modules if n.partition(".")[0] in ("torch", "transformers"))
    assert not imported, imported
"""


def run_without_torch(*arguments):
    return subprocess.run([sys.executable, "-c", WITHOUT_TORCH, *arguments],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ))


def test_help_needs_no_torch():
    result = run_without_torch("--help")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith("usage: python -m moestat.record_hf")
    for option in ("--model", "--config", "--batch-size", "--max-new-tokens", "--device",
                   "--dtype", "--out", "--seed", "--moestat-cli"):
        assert option in result.stdout


def test_every_option_has_a_help_text_with_its_default():
    parser = record_hf.build_parser()
    formatter = parser._get_formatter()
    options = [action for action in parser._actions
               if not isinstance(action, argparse._HelpAction)]
    assert len(options) == 15
    for action in options:
        assert action.help and action.help != argparse.SUPPRESS, action.option_strings
        text = formatter._expand_help(action)
        if action.default is not None:
            assert f"(default: {action.default}" in text, (action.option_strings, text)
    assert sum(action.default is not None for action in options) == 7
    help_text = parser.format_help()
    assert "keep only the first N decoder layers (default: all)" in " ".join(help_text.split())


def test_missing_torch_is_one_line_saying_what_to_install(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    result = run_without_torch("--config", str(tmp_path / "config.json"),
                               "--out", str(tmp_path / "out"))
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("record_hf: error: ")
    assert "pip install torch transformers" in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("arguments, message", [
    (["--prompt", "hello"],
     "prompts as text need --model's tokenizer: with --config, use --random-prompts"),
    (["--batch-size", "0"], "--batch-size must be at least 1, not 0"),
])
def test_argument_errors_come_before_torch(tmp_path, arguments, message):
    (tmp_path / "config.json").write_text("{}")
    result = run_without_torch("--config", str(tmp_path / "config.json"),
                               "--out", str(tmp_path / "out"), *arguments)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1] == f"python -m moestat.record_hf: error: {message}"
