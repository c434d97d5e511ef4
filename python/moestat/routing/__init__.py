"""Routed experts ("routes") in the formats of inference engines and RL trainers.

``moestat.RoutedExperts`` holds the top-k logical expert ids each MoE layer chose for a
request's tokens; these converters write and read the formats of SGLang 0.5.23 (and main's
narrow dtypes), vLLM 0.33.0, Megatron-Core's RouterReplay, verl 0.9.1 and slime:

    from moestat.routing import to_sglang, from_vllm
    meta = to_sglang(routes)                       # {"routed_experts": base64 int32}
    routes = from_vllm(output.routed_experts, layout, first_position=prompt_start)

``padded_batch`` lays requests' routes out as a padded training batch for a replay;
``pack_ids`` / ``unpack_ids`` bit-pack ids (ceil(log2 E) bits each) for transport.

Numpy only. ``moestat.routing.wire`` says what each format is and what is checked.
"""

from .batch import padded_batch
from .packing import bits_per_id, pack_ids, unpack_ids
from .wire import (
    SGLANG_WIRE_DTYPES,
    from_megatron,
    from_sglang,
    from_slime,
    from_verl,
    from_vllm,
    to_megatron,
    to_sglang,
    to_slime,
    to_verl,
    to_vllm,
)

__all__ = [
    "SGLANG_WIRE_DTYPES",
    "bits_per_id",
    "from_megatron",
    "from_sglang",
    "from_slime",
    "from_verl",
    "from_vllm",
    "pack_ids",
    "padded_batch",
    "to_megatron",
    "to_sglang",
    "to_slime",
    "to_verl",
    "to_vllm",
    "unpack_ids",
]
