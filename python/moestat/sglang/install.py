"""Switching a running SGLang process to moestat without touching SGLang's code.

SGLang makes its recorder in one place, ``ExpertDistributionRecorder.init_new`` (called by
the model runner, again after elastic-EP changes), and every call site reaches it through
``get_global_expert_distribution_recorder()``. ``install()`` makes ``init_new`` build
moestat's recorder and swaps a recorder SGLang already made through SGLang's own setter.

SGLang starts its schedulers with ``multiprocessing`` "spawn", so a patch in the launching
process does not reach them: ``python -m moestat.sglang.launch_server ...`` (or
``install_on_import()`` in every process) covers those.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys

from . import recorder as moestat_recorder

logger = logging.getLogger(__name__)

SGLANG_RECORDER_MODULE = "sglang.srt.eplb.expert_distribution"


def install():
    """Makes this process's SGLang record with moestat; returns the recorder now in use.

    Idempotent. A recorder SGLang already made is replaced by moestat's for the same
    metadata and rank, recording if it was recording.
    """
    from sglang.srt.eplb import expert_distribution as sglang_module

    sglang_class = sglang_module.ExpertDistributionRecorder
    if not getattr(sglang_class, "_moestat_installed", False):
        sglang_class.init_new = staticmethod(moestat_recorder.ExpertDistributionRecorder.init_new)
        sglang_class._moestat_installed = True
        logger.info("moestat records expert distribution for SGLang")

    current = sglang_module.get_global_expert_distribution_recorder()
    real_class = getattr(sglang_module, "_ExpertDistributionRecorderReal", None)
    if real_class is not None and isinstance(current, real_class):
        replacement = moestat_recorder.ExpertDistributionRecorder.init_new(
            current._expert_location_metadata, current._accumulator._rank)
        if current.recording and not replacement.recording:
            replacement.start_record()
        sglang_module.set_global_expert_distribution_recorder(replacement)
        current = replacement
    return current


def install_on_import():
    """Runs ``install()`` as soon as SGLang's recorder module is imported (now if it is)."""
    if SGLANG_RECORDER_MODULE in sys.modules:
        install()
    elif not any(isinstance(finder, _InstallAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _InstallAfterImport())


class _InstallAfterImport(importlib.abc.MetaPathFinder):
    """Finds SGLang's recorder module with the other finders and installs once it has run."""

    def find_spec(self, name, path, target=None):
        if name != SGLANG_RECORDER_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_then_install(module):
            run_module(module)
            install()

        spec.loader.exec_module = exec_then_install
        return spec
