"""SGLang's routed-experts code, loaded without SGLang's server, for the engine tests that
compare moestat with it (test_sglang_routed_experts.py, test_sglang_routes_wire.py).

What is loaded is SGLang 0.5.23's own (the release pinned in
tests/engines/requirements-no-deps.txt): ``sglang/srt/state_capturer/base.py`` and
``routed_experts.py`` (``RoutedExpertsCapturer``, ``extract_routed_experts_from_meta_info``),
and the detokenizer's encoder ``DetokenizerManager._b64_encode_per_request``
(``sglang/srt/managers/detokenizer_manager.py``). None of these modules imports on its own
(the whole server: triton kernels, zmq, the memory pools), so, as sglang_harness.py does for
expert_distribution.py:

- `sglang_file` finds a file in the installed sglang package
  (``importlib.util.find_spec("sglang")``, which looks the package up and runs nothing), or
  extracts it from the wheel that MOESTAT_SGLANG_WHEEL names (as for the harness).
- `load` executes a real file under its real name, with the sglang packages it lives in made
  bare (`bare_package`: their ``__init__.py`` does not run) and each server module it imports
  replaced by a stand-in (`stand_in_module`) holding only the names it imports; which
  stand-ins, and what they answer, is each test's own. ``torch`` and ``numpy`` are real. The
  stand-ins are in ``sys.modules`` only while the file executes, so the harness (which
  installs its own) can run in the same process.
- The encoder is a method of DetokenizerManager, whose module cannot load here:
  `b64_encode_per_request` compiles its definition from the real source (``ast``, under the
  file's own name and line numbers), to be called as the staticmethod it is.

``pybase64`` is not in .venv-engines (sglang is installed there with --no-deps): where it is
missing, `pybase64_module` gives a stand-in whose ``b64encode``/``b64decode`` are the standard
library's, which pybase64 documents itself a drop-in for (same alphabet, padding and
non-validating decode); the real pybase64 is used when installed.
"""
from __future__ import annotations

import ast
import base64
import contextlib
import importlib.metadata
import importlib.util
import os
import pathlib
import sys
import types
import zipfile
from typing import Callable, List, Optional

import pytest

import sglang_harness

PINNED = "0.5.23"
BASE = "sglang/srt/state_capturer/base.py"
ROUTED_EXPERTS = "sglang/srt/state_capturer/routed_experts.py"
DETOKENIZER = "sglang/srt/managers/detokenizer_manager.py"
LOADED_FILES = (BASE, ROUTED_EXPERTS, DETOKENIZER)  # what sglang_harness.py --zip carries


def sglang_file(relative: str, tmp_dir: pathlib.Path) -> tuple[pathlib.Path, str]:
    """(path of `relative` inside the sglang package, sglang's version). From the wheel that
    MOESTAT_SGLANG_WHEEL names, extracted into `tmp_dir`, where it is set; else the installed
    package, and the test is skipped where there is none."""
    wheel = os.environ.get("MOESTAT_SGLANG_WHEEL")
    if wheel:
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(relative, tmp_dir)
            version = sglang_harness._wheel_version(archive)
        return tmp_dir / relative, version
    spec = importlib.util.find_spec("sglang")  # looks the package up; runs nothing
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("sglang is not installed (scripts/setup_engine_venv.sh), and "
                    "MOESTAT_SGLANG_WHEEL is not set")
    root = pathlib.Path(list(spec.submodule_search_locations)[0]).parent
    return root / relative, importlib.metadata.version("sglang")


def pybase64_module() -> types.ModuleType:
    """pybase64 where installed, else a stand-in with the standard library's b64encode and
    b64decode (marked ``__moestat_stand_in__``)."""
    try:
        import pybase64  # noqa: PLC0415

        return pybase64
    except ImportError:
        module = types.ModuleType("pybase64")
        module.b64encode = base64.b64encode
        module.b64decode = base64.b64decode
        module.__moestat_stand_in__ = True
        return module


def stand_in_module(name: str, **names) -> types.ModuleType:
    """A module `name` holding only `names`."""
    module = sglang_harness._module(name)
    module.__dict__.update(names)
    return module


def bare_package(name: str) -> types.ModuleType:
    """A package `name` that runs no __init__.py and from which no real submodule can load."""
    return sglang_harness._package(name, None)


@contextlib.contextmanager
def _modules_in_sys(modules: dict[str, types.ModuleType]):
    """`modules` in sys.modules for the duration; what was there before comes back after."""
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def load(name: str, path: pathlib.Path, stand_ins: dict) -> types.ModuleType:
    """The real file `path` executed as module `name`, with `stand_ins` (module name -> module)
    in sys.modules while it executes."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    with _modules_in_sys({**stand_ins, name: module}):
        spec.loader.exec_module(module)
    return module


def b64_encode_per_request(tmp_dir: pathlib.Path,
                           pybase64: types.ModuleType) -> tuple[Callable, List[str]]:
    """(DetokenizerManager._b64_encode_per_request compiled from the real source, the
    decorators SGLang gives it, as source text). The decorators are dropped: the function is
    called as the staticmethod it is. `pybase64` is the module it encodes with."""
    import torch

    path, _ = sglang_file(DETOKENIZER, tmp_dir)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    manager = next(node for node in tree.body
                   if isinstance(node, ast.ClassDef) and node.name == "DetokenizerManager")
    method = next(node for node in manager.body
                  if isinstance(node, ast.FunctionDef) and node.name == "_b64_encode_per_request")
    decorators = [ast.unparse(d) for d in method.decorator_list]
    method.decorator_list = []
    namespace = {"pybase64": pybase64, "torch": torch, "List": List, "Optional": Optional}
    code = compile(ast.Module(body=[method], type_ignores=[]), str(path), "exec")
    exec(code, namespace)  # noqa: S102 - SGLang's own definition, see the docstring
    return namespace["_b64_encode_per_request"], decorators
