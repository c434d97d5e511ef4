"""Started by ``python -m moestat.sglang.launch_server``: every Python process of the server
(SGLang spawns its schedulers) installs moestat's recorder when SGLang's is imported."""

import importlib.machinery
import importlib.util
import os
import sys

if os.environ.get("MOESTAT_SGLANG_INSTALL") == "1":
    from moestat.sglang.install import install_on_import

    install_on_import()


def _run_shadowed_sitecustomize():
    """This file hides any sitecustomize later on the path (a distribution's); run it."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_run_shadowed_sitecustomize()
