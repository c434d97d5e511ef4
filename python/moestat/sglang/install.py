"""Switching a running SGLang process to moestat without touching SGLang's code.

SGLang makes its recorder in one place, ``ExpertDistributionRecorder.init_new`` (called by
the model runner, again after elastic-EP changes), and every call site reaches it through
``get_global_expert_distribution_recorder()``. ``install()`` makes ``init_new`` build
moestat's recorder and swaps a recorder SGLang already made through SGLang's own setter.

SGLang starts its schedulers with ``multiprocessing`` "spawn", so a patch in the launching
process does not reach them: ``python -m moestat.sglang.launch_server ...`` (or
``install_on_import()`` in every process) covers those.

SGLang's routed-experts capturer is switched the same way when asked
(``install_routed_experts()``; ``install_on_import(routed_experts=True)``, or
MOESTAT_SGLANG_ROUTED_EXPERTS=1 in the server's environment): routed_experts.py.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import logging
import os
import sys

from . import recorder as moestat_recorder

logger = logging.getLogger(__name__)

SGLANG_RECORDER_MODULE = "sglang.srt.eplb.expert_distribution"
SGLANG_CAPTURER_MODULE = "sglang.srt.state_capturer.routed_experts"
#: "1": install_on_import() also installs moestat's routed-experts capturer (routed_experts.py).
ROUTED_EXPERTS_ENV = "MOESTAT_SGLANG_ROUTED_EXPERTS"


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


def install_on_import(routed_experts=None):
    """Runs ``install()`` as soon as SGLang's recorder module is imported (now if it is).

    ``routed_experts``: also install moestat's routed-experts capturer
    (``moestat.sglang.routed_experts.install``) when SGLang's capturer module is imported;
    default: the environment variable MOESTAT_SGLANG_ROUTED_EXPERTS is "1".
    """
    if routed_experts is None:
        routed_experts = os.environ.get(ROUTED_EXPERTS_ENV) == "1"
    _on_import(SGLANG_RECORDER_MODULE, install)
    if routed_experts:
        _on_import(SGLANG_CAPTURER_MODULE, install_routed_experts)


def install_routed_experts():
    """Makes SGLang's ``RoutedExpertsCapturer.create`` build moestat's capturer
    (routed_experts.py; idempotent). Where moestat cannot record on the device (not cuda or
    cpu, or no CUDA build), SGLang's own capturer is made, and that is logged."""
    from .. import _core
    from .routed_experts import RoutedExpertsCapturer

    module = importlib.import_module(SGLANG_CAPTURER_MODULE)
    sglang_class = module.RoutedExpertsCapturer
    if getattr(sglang_class, "_moestat_installed", False):
        return
    sglang_create = sglang_class.create

    def create(*, model, model_config, num_tokens, max_running_requests, device):
        arguments = dict(model=model, model_config=model_config, num_tokens=num_tokens,
                         max_running_requests=max_running_requests, device=device)
        if str(device) == "cpu" or (str(device).startswith("cuda") and _core.has_cuda):
            try:
                return RoutedExpertsCapturer.create(**arguments)
            except Exception:  # noqa: BLE001 - the server starts with SGLang's capturer
                logger.exception("moestat routed experts: no capturer could be made; "
                                 "SGLang's own capturer is used")
        else:
            logger.warning("moestat routed experts: device %r is not recorded by moestat; "
                           "SGLang's own capturer is used", device)
        return sglang_create(**arguments)

    sglang_class.create = staticmethod(create)
    sglang_class._moestat_installed = True
    logger.info("moestat captures routed experts for SGLang")


def _on_import(name, installer):
    if name in sys.modules:
        installer()
    elif not any(isinstance(finder, _InstallAfterImport) and finder.name == name
                 for finder in sys.meta_path):
        sys.meta_path.insert(0, _InstallAfterImport(name, installer))


class _InstallAfterImport(importlib.abc.MetaPathFinder):
    """Finds one SGLang module with the other finders and installs once it has run."""

    def __init__(self, name, installer):
        self.name = name
        self.installer = installer

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module
        installer = self.installer

        def exec_then_install(module):
            run_module(module)
            installer()

        spec.loader.exec_module = exec_then_install
        return spec
