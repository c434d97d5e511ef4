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
"""

import importlib
import logging
import os

logger = logging.getLogger(__name__)

ENV_SWITCH = "MOESTAT_VLLM_EPLB"


def register():
    """vLLM's general-plugin hook: with ``MOESTAT_VLLM_EPLB=1`` (or true, yes, on), makes
    moestat's policy vLLM's "default" EPLB policy. Idempotent (vLLM may call it several times
    in one process). Returns the policy class, or None when the switch is not on."""
    if os.environ.get(ENV_SWITCH, "").strip().lower() not in ("1", "true", "yes", "on"):
        return None
    from vllm.distributed.eplb import policy as eplb_policies

    from .eplb_policy import MoestatEplbPolicy

    displaced = eplb_policies.EPLB_POLICIES.get("default")
    if displaced is not None and not issubclass(displaced, MoestatEplbPolicy):
        MoestatEplbPolicy.reference_policy = displaced
    eplb_policies.EPLB_POLICIES["default"] = MoestatEplbPolicy
    logger.info("moestat: vLLM's EPLB policy 'default' is moestat's planner (reference: %s)",
                MoestatEplbPolicy.reference_policy.__name__)
    return MoestatEplbPolicy


def __getattr__(name):
    # The policy module imports vLLM and torch: only on use.
    if name == "MoestatEplbPolicy":
        return importlib.import_module(f"{__name__}.eplb_policy").MoestatEplbPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["register", "MoestatEplbPolicy", "ENV_SWITCH"]
