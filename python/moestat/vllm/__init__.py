"""moestat inside vLLM (0.33.0): moestat's planner as vLLM's EPLB policy.

moestat's package declares a ``vllm.general_plugins`` entry point (``moestat =
moestat.vllm:register``; pyproject.toml). vLLM loads those in its front end, engine core and
every worker before the model is built, so with moestat installed next to vLLM and
``MOESTAT_VLLM_EPLB=1`` in the environment, ``--enable-eplb`` plans with
``MoestatEplbPolicy`` (``eplb_policy.py``): moestat's planner, never worse in sample than
vLLM's default policy on the load vLLM hands it, aligned with the placement in force so that
fewer expert weights cross ranks. Without the variable, installing moestat changes nothing in
vLLM.

vLLM 0.33.0 selects the policy by name, ``EPLBConfig.policy``, a ``Literal["default"]``: its
config validation refuses any other name (and async EPLB, the default mode, requires
"default"). So ``register()`` replaces ``EPLB_POLICIES["default"]``, the entry that
``EplbState.add_model`` looks up, and keeps the policy it displaced as the reference that
moestat's plan must match or beat.

The switch is an environment variable because vLLM's own selection cannot name it.

Offline (``offline.py``; vLLM 0.33.0 takes no initial placement): ``MOESTAT_VLLM_EPLB_LOAD_DIR``
makes the policy write every load window vLLM hands it as a moestat counts file, and
``MOESTAT_VLLM_EPLB_PLACEMENT`` makes it return a placement planned offline, which vLLM applies
at its first rearrange. Either installs the policy too; without ``MOESTAT_VLLM_EPLB=1`` it then
plans as vLLM's default policy. ``load_window_counts`` reads vLLM's load window tensors.
"""

import importlib
import logging
import os

logger = logging.getLogger(__name__)

ENV_SWITCH = "MOESTAT_VLLM_EPLB"
ENV_LOAD_DIR = "MOESTAT_VLLM_EPLB_LOAD_DIR"  # as offline.py (not imported here: it needs numpy)
ENV_PLACEMENT = "MOESTAT_VLLM_EPLB_PLACEMENT"


def register():
    """vLLM's general-plugin hook: with ``MOESTAT_VLLM_EPLB=1`` (or true, yes, on), makes
    moestat's policy vLLM's "default" EPLB policy; with only ``MOESTAT_VLLM_EPLB_LOAD_DIR`` or
    ``MOESTAT_VLLM_EPLB_PLACEMENT`` set, installs it too, planning as the policy it displaced
    (vLLM's) besides writing windows or serving the placement. Idempotent (vLLM may call it
    several times in one process). Returns the policy class, or None when none is set."""
    switch = os.environ.get(ENV_SWITCH, "").strip().lower() in ("1", "true", "yes", "on")
    offline = any(os.environ.get(name, "").strip() for name in (ENV_LOAD_DIR, ENV_PLACEMENT))
    if not switch and not offline:
        return None
    from vllm.distributed.eplb import policy as eplb_policies

    from .eplb_policy import MoestatEplbPolicy

    displaced = eplb_policies.EPLB_POLICIES.get("default")
    if displaced is not None and not issubclass(displaced, MoestatEplbPolicy):
        MoestatEplbPolicy.reference_policy = displaced
    MoestatEplbPolicy.plan_with_moestat = switch
    eplb_policies.EPLB_POLICIES["default"] = MoestatEplbPolicy
    logger.info("moestat: vLLM's EPLB policy 'default' is moestat's (plans: %s%s%s)",
                "moestat's planner" if switch else MoestatEplbPolicy.reference_policy.__name__,
                f", load windows to {os.environ[ENV_LOAD_DIR]}"
                if os.environ.get(ENV_LOAD_DIR, "").strip() else "",
                f", placement {os.environ[ENV_PLACEMENT]}"
                if os.environ.get(ENV_PLACEMENT, "").strip() else "")
    return MoestatEplbPolicy


_LAZY = {  # these import numpy, torch or vLLM: only on use
    "MoestatEplbPolicy": "eplb_policy",
    "load_window_counts": "offline",
    "load_window_tensors": "offline",
    "write_load_window": "offline",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["register", "MoestatEplbPolicy", "ENV_SWITCH", "ENV_LOAD_DIR", "ENV_PLACEMENT",
           "load_window_counts", "load_window_tensors", "write_load_window"]
