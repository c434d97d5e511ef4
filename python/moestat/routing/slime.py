"""Routes as slime's ``Sample.rollout_routed_experts``: int32 ``[len(tokens) - 1, L, K]``, all
decoder layers, from position 0."""
from __future__ import annotations

from typing import Any

import numpy as np

from .._core import Error
from ._checks import LayoutFields, int_array, one_request_arg
from ._rows import all_layers, request_args, request_from_all_layers, request_name

__all__ = ["from_slime", "to_slime"]


def to_slime(routes: Any, *, allow_invalid: bool = False) -> np.ndarray:
    """`routes` (one request, from position 0) as slime's ``Sample.rollout_routed_experts``
    (THUDM/slime HEAD 624b824a, ``slime/utils/types.py``): int32 ``[len(tokens) - 1, L, K]``,
    L = ``num_layers``, ALL decoder layers (slime picks the MoE ones by ``moe_layer_freq`` when
    it replays), dense layers 0. slime asserts ``len(routes) == len(tokens) - 1``
    (``cp_utils.prepare_routed_experts_for_routing_replay``), so `routes` must start at position
    0 and cover the whole finished sequence. (slime receives the array from SGLang's int32 wire,
    ``to_sglang``.)

    Not-valid rows are an error naming the first one; ``allow_invalid=True`` writes them as 0
    (slime's own validation then fails a MoE layer that is all 0).
    """
    fn = "to_slime"
    routes = one_request_arg(routes, fn)
    layout = LayoutFields(routes.layout, fn)
    if routes.first_position != 0:
        raise Error(f"{fn}: {request_name(routes)} starts at position "
                    f"{routes.first_position}; slime's routes cover the whole sequence from "
                    f"position 0 (len(tokens) - 1 rows)")
    return all_layers(routes, layout, np.dtype(np.int32), fn, target="slime's format",
                      allow_invalid=allow_invalid)


def from_slime(routed_experts: Any, layout: Any, request_id: str = "", *,
               num_tokens: int | None = None, model: str = "", placement_version: int = 0,
               unrecorded: str = "error", dense: str = "error") -> Any:
    """Routes of one request from slime's ``rollout_routed_experts`` (the format of
    ``to_slime``): int32 ``[rows, L, K]``, L = all decoder layers, rows = positions
    ``[0, len(tokens) - 1)``. ``num_tokens``: ``len(tokens)``, if known: the row count must
    then be ``num_tokens - 1``. Checks as in ``from_sglang``.
    """
    fn = "from_slime"
    info, _, num_tokens = request_args(fn, layout, 0, request_id, num_tokens, unrecorded, dense)
    array = int_array(routed_experts, fn, "routed_experts", 3, ("int32",))
    return request_from_all_layers(array, info, first_position=0, num_tokens=num_tokens,
                                   request_id=request_id, model=model,
                                   placement_version=placement_version, unrecorded=unrecorded,
                                   dense=dense, fn=fn)
