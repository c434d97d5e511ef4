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

Per-request routes for RL routing replay (``RouteRecorder``, ``RoutedExperts``, routes files,
and ``moestat.routing``'s conversions to SGLang, vLLM, Megatron, verl and slime) are in
docs/routing-replay.md. See docs/python.md for the whole API; ``moestat.sglang`` (needs torch) is SGLang's recorder
interface with moestat underneath (docs/sglang.md).
"""

from ._core import (
    BalancednessMean,
    CpuRecorder,
    Error,
    HotExpert,
    LiveMetrics,
    MetricValues,
    CpuRouteRecorder,
    ModelTopology,
    PendingSlots,
    Placement,
    Recorder,
    RoutedExperts,
    RouteLayout,
    RouteRecorder,
    Snapshot,
    __version__,
    advise_rebalance,
    balancedness_sum_ratio,
    evaluate_placement,
    expert_gini,
    file_format,
    gpu_loads,
    has_cuda,
    hot_expert_hit_rate,
    has_http,
    hot_expert_mask,
    plan_deepseek,
    placement_gpu_loads,
    plan_moestat,
    prometheus_content_type,
    prometheus_text,
    read_counts,
    read_logical_counts,
    read_placement,
    read_routes,
    sglang_dump_bytes,
    sglang_stat_dump_bytes,
    write_logical_counts,
    write_placement,
    write_prometheus_file,
    write_routes,
    write_sglang_dump,
)
from .eplb import rebalance_experts

if has_cuda:
    from ._core import CudaRecorder, CudaRouteRecorder
if has_http:
    from ._core import MetricsServer

__all__ = [
    "BalancednessMean",
    "CpuRecorder",
    "CpuRouteRecorder",
    "Error",
    "HotExpert",
    "LiveMetrics",
    "MetricValues",
    "ModelTopology",
    "PendingSlots",
    "Placement",
    "Recorder",
    "RouteLayout",
    "RouteRecorder",
    "RoutedExperts",
    "Snapshot",
    "__version__",
    "advise_rebalance",
    "balancedness_sum_ratio",
    "evaluate_placement",
    "expert_gini",
    "file_format",
    "gpu_loads",
    "has_cuda",
    "hot_expert_hit_rate",
    "has_http",
    "hot_expert_mask",
    "plan_deepseek",
    "placement_gpu_loads",
    "plan_moestat",
    "prometheus_content_type",
    "prometheus_text",
    "read_counts",
    "read_logical_counts",
    "read_placement",
    "read_routes",
    "rebalance_experts",
    "sglang_dump_bytes",
    "sglang_stat_dump_bytes",
    "write_logical_counts",
    "write_placement",
    "write_prometheus_file",
    "write_routes",
    "write_sglang_dump",
] + (["CudaRecorder", "CudaRouteRecorder"] if has_cuda else []) + (["MetricsServer"] if has_http else [])
