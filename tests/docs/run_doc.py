#!/usr/bin/env python3
"""Runs the shell and Python examples of one markdown document and checks their output.

    run_doc.py DOC --source-dir REPO --build-dir BUILD --cli MOESTAT [--engine-venv VENV]
               [--shared DIR]

The document's blocks run in order in one temporary directory, with `moestat` on PATH (and
as build/moestat, as the documents spell it from the repository root), the built package on
PYTHONPATH and the repository's bench/ (its shipped results) as bench/. Blocks run exactly as
the document shows them: there is no hidden setup. Markers: tests/docs/README.md. Exit 0 when every block that could
run passed, 1 on the first failure (its file:line and a diff), 77 (ctest's skip) when no
block could run here.
"""

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile

import markdown_blocks
import output_match

SKIPPED = 77
BLOCK_TIMEOUT_S = 300


class BlockFailed(Exception):
    """A block that did not pass; the message starts with its file:line."""


class Environment:
    """Where blocks run and with what: the working directory, PATH, PYTHONPATH, the venv."""

    def __init__(self, args, workdir, scripts):
        self.workdir = workdir
        self.scripts = scripts
        self.engine_venv = pathlib.Path(args.engine_venv).absolute() if args.engine_venv else None
        self.shared = pathlib.Path(args.shared).resolve() if args.shared else None
        self.cli = pathlib.Path(args.cli).resolve()
        build = pathlib.Path(args.build_dir).resolve()
        tools = workdir / "build"
        tools.mkdir()
        (tools / "moestat").symlink_to(pathlib.Path(args.cli).resolve())
        (tools / "python").symlink_to(build / "python")
        # Shipped data the documents read by their repository path (bench/results/...).
        (workdir / "bench").symlink_to(pathlib.Path(args.source_dir).resolve() / "bench")
        self.variables = dict(os.environ)
        self.variables.update({
            "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(build / "python"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "MOESTAT_SHARED": str(self.shared or ""),
            "MOESTAT_SOURCE_DIR": str(pathlib.Path(args.source_dir).resolve()),
        })

    def engine_python(self):
        return self.engine_venv / "bin" / "python" if self.engine_venv else None

    def missing(self, needs):
        """Why a block with these needs cannot run here ("" when it can)."""
        if "engines" in needs:
            python = self.engine_python()
            if python is None or not os.access(python, os.X_OK):
                if os.environ.get("MOESTAT_REQUIRE_ENGINE_VENV") == "1":
                    raise BlockFailed(f"{python} not found and MOESTAT_REQUIRE_ENGINE_VENV=1; "
                                      "run scripts/setup_engine_venv.sh")
                return f"no engine environment ({python}; scripts/setup_engine_venv.sh)"
        if "shared" in needs and not (self.shared and self.shared.is_dir()):
            return f"no shared data ({self.shared})"
        if "llama_cpp" in needs and not self.has_llama_record():
            # CI's setup.sh --with-engines builds llama.cpp, so there it must be in the CLI.
            if os.environ.get("MOESTAT_REQUIRE_ENGINE_VENV") == "1":
                raise BlockFailed(f"{self.cli} has no llama-record and MOESTAT_REQUIRE_ENGINE_VENV"
                                  "=1; run scripts/setup_llama_cpp.sh, then configure again")
            return f"{self.cli} was built without llama.cpp (scripts/setup_llama_cpp.sh)"
        return ""

    def has_llama_record(self):
        """Whether the CLI has `llama-record` (a build with llama.cpp)."""
        done = subprocess.run([self.cli, "llama-record", "--help"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, check=False)
        return done.returncode == 0

    def run(self, command, needs, where):
        """(exit status, stdout and stderr together) of command in the working directory."""
        variables = dict(self.variables)
        if "engines" in needs:
            variables["PATH"] = f"{self.engine_venv / 'bin'}{os.pathsep}{variables['PATH']}"
        try:
            done = subprocess.run(command, cwd=self.workdir, env=variables, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired as timeout:
            output = timeout.output or b""  # bytes even with text=True
            if isinstance(output, bytes):
                output = output.decode(errors="replace")
            raise BlockFailed(f"{where}: still running after {BLOCK_TIMEOUT_S} s:\n"
                              f"{output}") from timeout
        return done.returncode, done.stdout

    def script(self, block, source, suffix):
        path = self.scripts / f"block_{block.line}{suffix}"
        path.write_text(source, encoding="utf-8")
        return str(path)


def _check_exit(status, output, where, what):
    if status != 0:
        raise BlockFailed(f"{where}: {what} exited {status}:\n{output}")


def _check_output(expected, printed, where, tolerance, varies):
    if not output_match.matches(expected, printed, tolerance, varies):
        raise BlockFailed(f"{where}: the output differs from the document's:\n"
                          f"{output_match.diff(expected, printed)}")


def _comparison(block):
    """(tolerance, varies) of a block: its own options, then its output block's."""
    options = [block] + ([block.expected] if block.expected else [])
    tolerance = next((b.tolerance for b in options if b.tolerance is not None),
                     output_match.DEFAULT_TOLERANCE)
    varies = tuple(prefix for b in options for prefix in b.varies)
    return tolerance, varies


def _console_commands(text):
    """(line offset, command, expected output) of each `$ ` command of a console block."""
    commands = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        if not lines[index].startswith("$ "):
            index += 1
            continue
        start = index
        command = [lines[index][2:]]
        while command[-1].endswith("\\") and index + 1 < len(lines):
            index += 1
            command.append(lines[index])
        index += 1
        output = []
        while index < len(lines) and not lines[index].startswith("$ "):
            output.append(lines[index])
            index += 1
        commands.append((start, "\n".join(command), "\n".join(output)))
    return commands


def _python(block, env):
    return str(env.engine_python() if "engines" in block.needs else sys.executable)


def _run_block(doc, block, env):
    where = f"{doc}:{block.line}"
    tolerance, varies = _comparison(block)
    if block.language == "python":
        status, printed = env.run([_python(block, env), env.script(block, block.text, ".py")],
                                  block.needs, where)
        _check_exit(status, printed, where, "the block")
    elif block.language == "sh":
        status, printed = env.run(["bash", "-e", "-o", "pipefail",
                                   env.script(block, block.text, ".sh")], block.needs, where)
        _check_exit(status, printed, where, "the block")
    else:
        for offset, command, expected in _console_commands(block.text):
            command_where = f"{doc}:{block.line + 1 + offset}"
            status, printed = env.run(["bash", "-o", "pipefail", "-c", command], block.needs,
                                      command_where)
            _check_exit(status, printed, command_where, f"`{command}`")
            _check_output(expected, printed, command_where, tolerance, varies)
        return
    if block.expected:
        _check_output(block.expected.text, printed, f"{doc}:{block.expected.line}", tolerance,
                      varies)


def run_document(doc, args):
    """Runs the document's blocks; False when it has run blocks but none could run here."""
    blocks = markdown_blocks.parse(doc)
    runnable = [block for block in blocks if block.action == "run"]
    skipped = [block for block in blocks if block.action == "skip"]
    ran = 0
    with tempfile.TemporaryDirectory(prefix="moestat-doc-") as temporary:
        workdir = pathlib.Path(temporary) / "work"
        scripts = pathlib.Path(temporary) / "scripts"
        workdir.mkdir()
        scripts.mkdir()
        env = Environment(args, workdir, scripts)
        for block in runnable:
            missing = env.missing(block.needs)
            if missing:
                print(f"{doc}:{block.line}: skipped here: {missing}")
                continue
            _run_block(doc, block, env)
            ran += 1
            print(f"{doc}:{block.line}: {block.language} block passed")
    for block in skipped:
        print(f"{doc}:{block.line}: not run: {block.reason}")
    print(f"{doc}: {ran} of {len(runnable)} run blocks passed, {len(skipped)} marked not run")
    return ran > 0 or not runnable


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("doc")
    parser.add_argument("--source-dir", required=True, help="the repository root")
    parser.add_argument("--build-dir", required=True, help="the build tree (build/python in it)")
    parser.add_argument("--cli", required=True, help="the built moestat executable")
    parser.add_argument("--engine-venv", help="the engine tests' virtual environment")
    parser.add_argument("--shared", help="the shared data folder (../shared)")
    args = parser.parse_args()
    try:
        could_run = run_document(args.doc, args)
    except (markdown_blocks.MarkupError, BlockFailed) as failure:
        print(f"FAILED {failure}", file=sys.stderr)
        return 1
    return 0 if could_run else SKIPPED


if __name__ == "__main__":
    sys.exit(main())
