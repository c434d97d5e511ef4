#!/usr/bin/env python3
"""Checks that every #include follows the direction of the library's layers.

The layers and what each may use are those of the CMake targets (docs/architecture.md,
"Layers and their targets"). A layer's public headers live under include/moestat/<layer>/
(include/moestat/*.hpp for core, but for workload.hpp and report.hpp), its private ones
under src/<layer>/. CMake keeps a layer's private headers off other layers' include paths;
this check covers what the compiler cannot see: `#include "../..."` (which finds any file
from anywhere) and public headers of a layer above or beside the includer. Tools, the
Python module, tests and benchmarks may include any public header, and only the private
headers listed in WHITE_BOX (through the moestat_white_box CMake target). llama.cpp's headers
(llama.h, ggml*.h, gguf.h) are included by the llama_cpp layer's sources and programs only.

Prints file:line and the reason for every offending include; exits 1 if there is any.
Usage: scripts/check_layers.py [REPOSITORY_ROOT]
"""

import re
import sys
from pathlib import Path

# What each layer may include besides itself, as its CMake target links them (the closure
# is taken: report may include core's headers through plan and io).
USES = {
    "core": set(),
    "record_cpu": {"core"},
    "io": {"core"},
    "plan": {"core"},
    "workload": {"core"},
    "cuda_support": {"core"},
    # io for the per-token trace writer (io/trace_file.hpp).
    "record_cuda": {"core", "io", "cuda_support"},
    "report": {"plan", "io"},
    # io for the atomic write of the metrics file.
    "online": {"core", "io"},
    # The HTTP endpoint, apart so that only a program serving metrics links it.
    "online_http": {"online"},
    # Per-request routes: io for their file (a safetensors container).
    "routes": {"core", "io"},
    "routes_cuda": {"routes", "cuda_support"},
    # Recording inside llama.cpp: the one layer that includes llama.cpp's headers.
    "llama_cpp": {"core"},
}

# Private folders shared beyond their own layer, with the layers given their include path.
SHARED_PRIVATE = {
    "src/core/internal": {"core", "record_cpu", "record_cuda"},
    "src/cuda_support": {"cuda_support", "record_cuda", "routes_cuda"},
}

# Private headers that white-box tests and benchmarks include, and why.
WHITE_BOX = {
    "src/record/cpu/topk_histogram.hpp": "unit and property tests of the CPU counting loop",
    "src/io/zip_archive.hpp": "tests that build damaged .pt archives",
    "src/io/codec.hpp": "the codec test drives every payload through every registered codec",
    "src/io/payload_mappings.hpp": "the codec test maps a payload no codec knows",
    "src/io/pickle.hpp": "the .pt fuzzer and its seeds drive the unpickler",
    "src/io/read_budget.hpp": "the .pt fuzzer drives the unpickler",
    "src/record/cuda/record_kernels.cuh": "the GPU benchmarks time the launchers",
    "src/cuda_support/cuda_check.hpp": "the GPU benchmarks check their CUDA calls",
    "src/report/ticks.hpp": "the report test checks axis ticks and their short labels",
}

SCANNED = ["src", "include", "tools", "python/src", "tests", "bench"]
SUFFIXES = {".cpp", ".cc", ".hpp", ".h", ".cu", ".cuh"}
# Folders searched for a quoted include after the includer's own: the include paths CMake
# gives (tests/ for test support, the shared private folders, src/ for white-box targets).
QUOTED_ROOTS = ["tests", "src/core/internal", "src/cuda_support", "src"]
TOP = "top"  # tools, python, tests, benchmarks: above every layer

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
# llama.cpp's headers (llama.h, ggml*.h, gguf.h): only the llama_cpp layer's sources, and the
# programs above the layers, include them; public headers never do.
LLAMA_CPP_HEADER = re.compile(r"^(llama|ggml|gguf)[-\w]*\.h$")


def closure(layer):
    seen, todo = set(), [layer]
    while todo:
        for used in USES[todo.pop()]:
            if used not in seen:
                seen.add(used)
                todo.append(used)
    return seen


def public_layer(relative):
    """The layer of a header under include/moestat/ ("io/pt.hpp", "report.hpp")."""
    parts = relative.split("/")
    if len(parts) == 1:
        return {"workload.hpp": "workload", "report.hpp": "report"}.get(parts[0], "core")
    if parts[0] == "record":
        return "record_cpu" if parts[1] == "cpu_recorder.hpp" else "record_cuda"
    if parts[0] == "online" and parts[1] == "metrics_server.hpp":
        return "online_http"
    if parts[0] == "routes" and parts[1] == "cuda_route_recorder.hpp":
        return "routes_cuda"
    return parts[0]


def private_layer(relative):
    """The layer of a file under src/ ("record/cuda/x.cu", "core/internal/y.hpp")."""
    parts = relative.split("/")
    if parts[0] == "record":
        return "record_" + parts[1]
    if parts[0] == "online" and parts[1] == "http":
        return "online_http"
    if parts[0] == "routes" and parts[1] == "cuda":
        return "routes_cuda"
    return parts[0]


def layer_of(path):
    """The layer a repository-relative path belongs to."""
    if path.startswith("include/moestat/"):
        return public_layer(path[len("include/moestat/"):])
    if path.startswith("src/"):
        return private_layer(path[len("src/"):])
    return TOP


def check_public(includer_layer, header_layer):
    if includer_layer in (TOP, header_layer) or header_layer in closure(includer_layer):
        return None
    return f"{includer_layer} may not include a public header of {header_layer}"


def check_private(includer, includer_layer, header):
    header_layer = layer_of(header)
    folder = header.rsplit("/", 1)[0]
    if folder in SHARED_PRIVATE:
        if includer_layer in SHARED_PRIVATE[folder]:
            return None
    elif includer_layer == header_layer:
        return None
    if includer_layer == TOP and header in WHITE_BOX:
        return None
    if includer_layer == TOP:
        return f"{header} is private; include public headers (or list it in WHITE_BOX)"
    return f"{includer_layer} may not include {header}, private to {header_layer}"


def resolve_quoted(root, includer, name):
    for base in [Path(includer).parent.as_posix()] + QUOTED_ROOTS:
        candidate = root / base / name
        if candidate.is_file():
            return candidate.resolve().relative_to(root.resolve()).as_posix()
    return None


def check_include(root, includer, quote, name):
    if quote == '"' and name.startswith("../"):
        return "#include \"../\" reaches into another folder; include through the layer's target"
    includer_layer = layer_of(includer)
    if LLAMA_CPP_HEADER.match(name):
        if includer.startswith("include/"):
            return f"public headers may not include llama.cpp's {name}"
        if includer_layer not in (TOP, "llama_cpp"):
            return f"{includer_layer} may not include llama.cpp's {name} (only llama_cpp may)"
        return None
    if quote == "<":
        if not name.startswith("moestat/"):
            return None  # system and third-party headers
        return check_public(includer_layer, public_layer(name[len("moestat/"):]))
    header = resolve_quoted(root, includer, name)
    if header is None:
        return f"\"{name}\" is not found next to the file nor on a known include path"
    if header.startswith("include/moestat/"):
        return check_public(includer_layer, layer_of(header))
    if header.startswith("src/"):
        return check_private(includer, includer_layer, header)
    return None  # the includer's own folder or test support


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
    problems = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            includer = path.relative_to(root).as_posix()
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            for number, line in enumerate(lines, 1):
                match = INCLUDE.match(line)
                if match:
                    problem = check_include(root, includer, match.group(1), match.group(2))
                    if problem:
                        problems.append(f"{includer}:{number}: {problem}")
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} include(s) against the direction of the layers "
              "(docs/architecture.md)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
