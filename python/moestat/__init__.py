"""moestat: record how Mixture-of-Experts models route tokens to experts, and plan placements.

The recorders take the router's top-k ids as numpy arrays or torch tensors (CPU, or CUDA for
``CudaRecorder``) without copying; snapshots, plans and files come back as numpy arrays.

    import moestat
    topology = moestat.ModelTopology.uniform(num_layers=4, num_experts=8, top_k=2)
    recorder = moestat.CpuRecorder(topology, mode="stat", window_size=100)
    recorder.start()
    recorder.begin_pass(0)
    recorder.record_topk(0, topk_ids)          # [tokens, 2] int32 or int64
    recorder.end_pass()
    counts = recorder.snapshot().logical_counts  # [passes, layers, experts]

See docs/python.md for the whole API; ``moestat.sglang`` (needs torch) is SGLang's recorder
interface with moestat underneath (docs/sglang.md).
"""

from ._core import (
    CpuRecorder,
    Error,
    ModelTopology,
    Placement,
    Recorder,
    Snapshot,
    __version__,
    advise_rebalance,
    evaluate_placement,
    expert_gini,
    file_format,
    has_cuda,
    hot_expert_hit_rate,
    hot_expert_mask,
    plan_deepseek,
    plan_moestat,
    read_counts,
    read_logical_counts,
    read_placement,
    write_logical_counts,
    write_placement,
    write_sglang_dump,
)
from .eplb import rebalance_experts

if has_cuda:
    from ._core import CudaRecorder

__all__ = [
    "CpuRecorder",
    "Error",
    "ModelTopology",
    "Placement",
    "Recorder",
    "Snapshot",
    "__version__",
    "advise_rebalance",
    "evaluate_placement",
    "expert_gini",
    "file_format",
    "has_cuda",
    "hot_expert_hit_rate",
    "hot_expert_mask",
    "plan_deepseek",
    "plan_moestat",
    "read_counts",
    "read_logical_counts",
    "read_placement",
    "rebalance_experts",
    "write_logical_counts",
    "write_placement",
    "write_sglang_dump",
] + (["CudaRecorder"] if has_cuda else [])
