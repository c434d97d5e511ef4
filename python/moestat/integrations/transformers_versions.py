"""The transformers versions whose routers moestat.integrations.transformers can read: those
in which every router it hooks returns (router_logits, routing_weights, top_k_ids). Older
ones are refused by name, with the version needed, rather than failing inside a hook (an
IndexError) or reading the wrong tensor (docs/transformers.md, "Supported versions")."""

import re
import sys

from .._core import Error

# The first transformers version in which a router returns its top-k ids: DeepSeek-V3's
# returned its logits alone before 5.13.0 (its MoE block picked the experts), and before 5.0.0
# the other families had no router module (their gate was a plain Linear).
FIRST_VERSION = {"DeepseekV3TopkRouter": (5, 13, 0)}
FIRST_VERSION_OF_THE_OTHERS = (5, 0, 0)


def check_transformers_version(model, routers: dict) -> None:
    """Raises moestat.Error when the installed transformers is older than the first version in
    which routers ({layer: module}, as found; none where none was recognised) return their
    top-k ids. Modules that are not transformers' own are not checked."""
    transformers = sys.modules.get("transformers")
    modules = list(routers.values()) or [model]
    if transformers is None or not any(type(module).__module__.startswith("transformers.")
                                       for module in modules):
        return
    names = sorted({type(router).__name__ for router in routers.values()})
    needed = max((FIRST_VERSION.get(name, FIRST_VERSION_OF_THE_OTHERS) for name in names),
                 default=FIRST_VERSION_OF_THE_OTHERS)
    if _version_tuple(transformers.__version__) < needed:
        needed = ".".join(map(str, needed))
        which = " and ".join(names) if names else "the MoE routers moestat reads"
        raise Error(f"{type(model).__name__}: transformers {transformers.__version__} is too old "
                    f"for moestat: {which} return their top-k ids from transformers {needed} on "
                    f"(pip install 'transformers>={needed}'; docs/transformers.md)")


def _version_tuple(version: str) -> tuple:
    """(major, minor, patch) of a version string such as 5.19.0 or 5.0.0.dev0."""
    numbers = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if numbers is None:
        raise Error(f"transformers reports a version moestat cannot read: {version!r}")
    return tuple(int(part or 0) for part in numbers.groups())
