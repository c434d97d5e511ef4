"""Routed experts ("routes") in the formats of inference engines and RL trainers, both ways:
SGLang 0.5.23 (and main's narrow dtypes), vLLM 0.33.0, Megatron-Core's RouterReplay, verl 0.9.1
and slime, one module each (``sglang``, ``vllm``, ``megatron``, ``verl``, ``slime``) over the
checks they share (``_checks``: arguments and OUTPUT_BOUND; ``_rows``: routes to a format's
rows and back):

    from moestat.routing import to_sglang, from_vllm
    meta = to_sglang(routes)                       # {"routed_experts": base64 int32}
    routes = from_vllm(output.routed_experts, layout, first_position=prompt_start)

``padded_batch`` lays requests' routes out as a padded training batch for a replay;
``pack_ids`` / ``unpack_ids`` bit-pack ids (ceil(log2 E) bits each) for transport.

A ``moestat.RoutedExperts`` holds, for tokens [first_position, first_position + num_tokens) of
one request, the top-k LOGICAL expert ids each MoE layer chose, with a validity mask: row t is
the routing computed when token first_position + t was fed forward. A finished request of
seqlen tokens (prompt + output) has seqlen - 1 routed tokens: the last sampled token is never
fed. Every upstream format below uses that same row convention; what differs is the layer
axis, the dtype, the transport, and that none but verl's can say "this row was not recorded".

=============  =========================================  ==============  =====================
format         array                                      dtype           layer axis
=============  =========================================  ==============  =====================
SGLang 0.5.23  base64 of raw little-endian [rows, L, K]   int32 (main:    all L decoder layers,
               in ``meta_info["routed_experts"]``         +uint16/uint8)  dense ones 0
vLLM 0.33.0    ``CompletionOutput.routed_experts``        uint8 (E<=256)  all L, dense ones 0
               [rows, L, K]; HTTP: base64 of a ``.npy``   else uint16
Megatron-Core  ``RouterReplay.set_replay_data``: one      int64           one array per MoE
               [tokens, K] per MoE layer                                  layer
verl 0.9.1     [bs, seq, L or MoE layers, K] + mask       int16           all L (R3) / MoE (R2)
slime          [len(tokens) - 1, L, K]                    int32           all L, dense ones 0
=============  =========================================  ==============  =====================

(L = the model's ``num_hidden_layers``, dense layers included; K = top_k; E = experts.)

Every ``to_*`` function takes routes and writes the format; every ``from_*`` function takes the
format and a ``moestat.RouteLayout`` (which decoder layers are MoE, E, K) and returns routes.
Both raise ``moestat.Error`` (one line, naming the position and decoder layer where one is at
fault) for a wrong shape or dtype, an id outside [0, E), a repeated id in a row, an id that a
narrow dtype cannot hold, and a row that the format cannot carry; ``TypeError`` for an argument
of the wrong type. What round-trips exactly: ``from_x(to_x(r), r.layout, ...)`` equals ``r``
(ids, validity, first position, request id) whenever ``to_x`` accepts ``r`` without
``allow_invalid``; verl keeps validity per token only.

Rows an engine did not record. SGLang, vLLM, slime and Megatron have no validity mask: an
unrecorded row is whatever the engine's zero-initialised buffer held (all ids 0) or a -1
sentinel. ``from_*`` finds such rows only where they cannot be a real routing: a MoE layer's
row whose K > 1 ids are all 0 (a repeated id) or all -1. By default (``unrecorded="error"``)
that is an error naming the position and layer; ``unrecorded="invalid"`` returns those rows
as not valid instead. With top_k == 1 an unrecorded row reads as expert 0 and cannot be told
apart. ``to_*`` refuses routes with not-valid rows for those formats unless
``allow_invalid=True``, which writes their ids as 0 (a trainer replays such a row as expert 0,
repeated K times: mask the tokens yourself).

Dense layers. In the all-layers formats (SGLang, vLLM, slime, verl with ``layers="all"``) the
columns of layers that are not MoE in the layout must be 0, as the engines leave them. A
non-zero id there means the layout does not match the model (a wrong MoE layer list or offset,
or a draft/MTP router that wrote into a target layer): ``from_*`` raises unless
``dense="ignore"``, which drops the dense columns unread.

Bounds. No converter builds an array of more than 16 times the bytes of the routes it is
given plus 1 GiB (``OUTPUT_BOUND``): a first position, offset or ``seq_len`` far past the
routes' rows, or a layout of far more decoder layers than MoE ones, is a ``moestat.Error``
naming the size before anything is allocated. A ``.npy`` payload must hold exactly the bytes
its header declares.

Only numpy is imported; torch tensors on the CPU are taken wherever an array is (through
``numpy.asarray``).
"""

from ._checks import OUTPUT_BOUND
from .batch import padded_batch
from .megatron import from_megatron, to_megatron
from .packing import bits_per_id, pack_ids, unpack_ids
from .sglang import SGLANG_WIRE_DTYPES, from_sglang, to_sglang
from .slime import from_slime, to_slime
from .verl import from_verl, to_verl
from .vllm import from_vllm, to_vllm

__all__ = [
    "OUTPUT_BOUND",
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
