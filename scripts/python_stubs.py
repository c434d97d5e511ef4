#!/usr/bin/env python3
"""Type stubs of moestat._core: nanobind's stub generator writes them, this keeps the checked-in
python/moestat/_core.pyi equal to what the built module would generate.

    PYTHONPATH=build/python:.deps/python python3 scripts/python_stubs.py --write
    PYTHONPATH=build/python:.deps/python python3 scripts/python_stubs.py --check  (ctest)

The checked-in stubs come from a build with the CUDA recorder. A build without it generates no
CudaRecorder class and has_cuda = False; --check compares such a build with the CUDA-only
parts of the checked-in stubs left out, so the same file serves both.
"""
import argparse
import difflib
import pathlib
import re
import subprocess
import sys
import tempfile

STUBS = pathlib.Path(__file__).resolve().parents[1] / "python" / "moestat" / "_core.pyi"
CUDA_ONLY_CLASS = "CudaRecorder"


def generate(path: pathlib.Path) -> None:
    subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "moestat._core",
                    "-o", str(path)], check=True)


def without_cuda(stubs: str) -> str:
    """The stubs as a build without the CUDA recorder generates them."""
    stubs = re.sub(rf"^class {CUDA_ONLY_CLASS}\(.*?(?=^\S)", "", stubs, flags=re.M | re.S)
    return re.sub(r"^has_cuda: bool = True$", "has_cuda: bool = False", stubs, flags=re.M)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help=f"regenerate {STUBS.name}")
    mode.add_argument("--check", action="store_true", help="fail when it is out of date")
    arguments = parser.parse_args()

    import moestat._core

    if arguments.write:
        if not moestat._core.has_cuda:
            sys.exit("--write needs a build with the CUDA recorder (nvcc found), whose stubs "
                     "cover both kinds of build")
        generate(STUBS)
        return 0
    with tempfile.TemporaryDirectory() as directory:
        fresh_path = pathlib.Path(directory) / STUBS.name
        generate(fresh_path)
        fresh = fresh_path.read_text()
    checked_in = STUBS.read_text()
    if not moestat._core.has_cuda:
        checked_in = without_cuda(checked_in)
    if fresh == checked_in:
        return 0
    sys.stdout.writelines(difflib.unified_diff(checked_in.splitlines(True), fresh.splitlines(True),
                                               str(STUBS), "generated"))
    print(f"\n{STUBS} is out of date: run scripts/python_stubs.py --write (see its docstring)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
