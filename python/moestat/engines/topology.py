"""Whether an engine's routers fit a recorder's topology."""

from .._core import Error, ModelTopology


def check_routers(model, topology: ModelTopology, routers: dict,
                  experts_attribute: str = "num_experts") -> None:
    """Raises moestat.Error unless the routers ({decoder layer index: router}) sit in
    topology's MoE layers and each has its experts (the router's experts_attribute) and
    top_k; a router without one of those attributes is not checked for it."""
    name = type(model).__name__
    router_layers = sorted(routers)
    topology_layers = [layer for layer, moe in enumerate(topology.moe_layers) if moe]
    if router_layers != topology_layers:
        raise Error(f"{name}: routers in decoder layers {router_layers}, but the recorder's "
                    f"topology has MoE layers {topology_layers}")
    for layer, router in routers.items():
        for attribute, expected in ((experts_attribute, topology.num_logical_experts),
                                    ("top_k", topology.top_k)):
            actual = getattr(router, attribute, expected)
            if actual != expected:
                raise Error(f"{name}: layer {layer}'s router has {attribute}={actual}, the "
                            f"recorder's topology {expected}")
