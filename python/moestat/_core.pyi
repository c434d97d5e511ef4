"""moestat's C++ library: recorders, snapshots, planners and file formats"""

from collections.abc import Sequence
import os
import pathlib
from typing import Annotated, Any

from numpy.typing import NDArray


has_cuda: bool = True

has_http: bool = True

class Error(ValueError):
    """Bad input or state, as moestat::Error reports it in C++."""

class ModelTopology:
    """
    Layers, experts and expert-parallel ranks of an MoE model. Layers count every decoder layer, dense ones included.
    """

    def __init__(self, num_layers: int, num_logical_experts: int, top_k: int, *, num_physical_experts: int | None = None, moe_layers: Sequence[bool] | None = None, ep_size: int = 1, num_nodes: int = 1, num_groups: int = 1, num_shared_expert_slots: int = 0) -> None:
        """
        num_physical_experts defaults to num_logical_experts and moe_layers to every layer. Raises moestat.Error naming the first inconsistent field.
        """

    @staticmethod
    def uniform(num_layers: int, num_experts: int, top_k: int) -> ModelTopology:
        """Every layer MoE, no replicas, one rank."""

    @property
    def num_layers(self) -> int: ...

    @property
    def moe_layers(self) -> list[bool]: ...

    @property
    def num_logical_experts(self) -> int: ...

    @property
    def num_physical_experts(self) -> int: ...

    @property
    def top_k(self) -> int: ...

    @property
    def ep_size(self) -> int: ...

    @property
    def num_nodes(self) -> int: ...

    @property
    def num_groups(self) -> int: ...

    @property
    def num_shared_expert_slots(self) -> int: ...

    def __eq__(self, arg: ModelTopology, /) -> bool: ...

    def __repr__(self) -> str: ...

class Placement:
    """
    Which logical expert each physical slot holds, per layer (SGLang's physical_to_logical_map).
    """

    def __init__(self, physical_to_logical: Annotated[NDArray, dict(writable=False)], num_logical_experts: int = 0, version: int = 0) -> None:
        """
        physical_to_logical: [layers, slots] integer array. num_logical_experts 0 takes the largest id + 1. Raises moestat.Error unless every layer holds every expert.
        """

    @staticmethod
    def trivial(num_layers: int, num_physical_experts: int, num_logical_experts: int, version: int = 0) -> Placement:
        """Slot p holds expert p % num_logical_experts in every layer."""

    @property
    def num_layers(self) -> int: ...

    @property
    def num_physical_experts(self) -> int: ...

    @property
    def num_logical_experts(self) -> int: ...

    @property
    def version(self) -> int: ...

    @property
    def physical_to_logical(self) -> object:
        """[layers, slots] int32"""

    @property
    def logical_to_physical(self) -> object:
        """
        [layers, experts, max replicas] int32: each expert's slots ascending, -1 padded
        """

    @property
    def replica_counts(self) -> object:
        """[layers, experts] int32"""

    def __repr__(self) -> str: ...

class Snapshot:
    """A consistent copy of what a recorder holds (never half a pass)."""

    @property
    def mode(self) -> str: ...

    @property
    def approximate(self) -> bool: ...

    @property
    def num_layers(self) -> int: ...

    @property
    def num_logical_experts(self) -> int: ...

    @property
    def num_physical_experts(self) -> int: ...

    @property
    def top_k(self) -> int: ...

    @property
    def num_passes(self) -> int: ...

    @property
    def dropped_ids(self) -> int: ...

    @property
    def dropped_tokens(self) -> int: ...

    @property
    def dropped_passes(self) -> int: ...

    @property
    def window_size(self) -> int: ...

    @property
    def num_tokens(self) -> int: ...

    @property
    def pass_ids(self) -> object:
        """[W] int64, the ids given to begin_pass, oldest first"""

    @property
    def placement_versions(self) -> object:
        """[W] uint64"""

    @property
    def pass_num_tokens(self) -> object:
        """[W] int64, the most valid tokens one layer of the pass got"""

    @property
    def logical_counts(self) -> object:
        """[W, L, E] int64 token assignments per pass"""

    @property
    def physical_counts(self) -> object:
        """[W, L, P] int64"""

    @property
    def decayed_logical_load(self) -> object:
        """[L, E] float64 (decayed mode; empty otherwise)"""

    @property
    def decayed_physical_load(self) -> object:
        """[L, P] float64 (decayed mode; empty otherwise)"""

    @property
    def token_pass_ids(self) -> object:
        """[N] int64 (per_token mode)"""

    @property
    def token_physical_ids(self) -> object:
        """[N, L, top_k] int32, -1 where nothing was recorded (per_token mode)"""

    @property
    def token_logical_ids(self) -> object:
        """[N, L, top_k] int32 (per_token mode)"""

    def logical_totals(self) -> object:
        """[L, E] int64 counts summed over the window (or the kept tokens)"""

    def physical_totals(self) -> object:
        """[L, P] int64"""

    def __repr__(self) -> str: ...

class Recorder:
    """
    Records which experts tokens are routed to, pass by pass. Hooks (begin_pass, record_topk, record_local_counts, end_pass) come from the forward thread in order; control (start, stop, reset, snapshot, set_placement) from any thread.
    """

    def begin_pass(self, pass_id: int) -> None:
        """Opens a pass; pass_id is kept."""

    def record_topk(self, layer: int, topk_ids: Annotated[NDArray, dict(writable=False)], num_valid_tokens: int | Annotated[NDArray, dict(writable=False)] | None = None) -> None:
        """
        Counts one layer's router choices. topk_ids: [tokens, k] int32 or int64 ids of physical expert slots (numpy or torch; any strides), mapped to logical experts by the placement in force; a model without replicas passes its logical ids, which the trivial placement (the default: slot p = expert p) maps to themselves. -1 is padding; other ids outside [0, P) are dropped and tallied. num_valid_tokens: None (every row), an int, or a one-element int32/int64 array (on the device for CudaRecorder).
        """

    def record_topk_layers(self, layers: Sequence[int], topk_ids: Sequence[Annotated[NDArray, dict(writable=False)]], num_valid_tokens: int | Annotated[NDArray, dict(writable=False)] | None = None) -> None:
        """
        record_topk for several layers of the open pass at once: layers[i]'s ids are topk_ids[i]; num_valid_tokens as for record_topk, applied to every layer. Counts what the calls one by one would (nothing if any is invalid); CudaRecorder counts up to 64 layers in one kernel, so an engine that keeps each layer's ids until the pass ends adds one node per pass to a captured graph instead of one per layer.
        """

    def record_local_counts(self, layer: int, counts: Annotated[NDArray, dict(writable=False)], rank: int) -> None:
        """
        Adds one rank's per-local-expert token counts (DeepEP low-latency masked_m, or normal-dispatch host counts in stat_approx mode); trailing shared-expert slots are dropped.
        """

    def end_pass(self) -> None:
        """Closes the pass and commits it."""

    def abort_pass(self) -> None:
        """
        Closes the pass without committing it: what it counted is discarded (a forward that failed part-way). Eager passes only.
        """

    def start(self) -> None:
        """Clears everything and records from the next pass."""

    def stop(self) -> None:
        """Stops recording; the data stays."""

    def reset(self) -> None:
        """Clears everything; recording stays as it was."""

    @property
    def is_recording(self) -> bool: ...

    def snapshot(self) -> Snapshot:
        """A copy of everything recorded, logical ids resolved."""

    def set_placement(self, placement: Placement) -> None:
        """
        Makes placement current for passes that end from now on; its version must be higher than the current one's.
        """

    @property
    def topology(self) -> ModelTopology: ...

class CpuRecorder(Recorder):
    """The recorder for host arrays."""

    def __init__(self, topology: ModelTopology, *, mode: str = 'stat', window_size: int = 1000, decay: float = 0.95, per_token_capacity: int = 16384) -> None:
        """
        mode: 'stat' (a window of the last window_size passes; -1 keeps all), 'stat_approx' (the same, fed with DeepEP normal-dispatch counts), 'per_pass', 'per_token' (top-k ids of every token; per_token_capacity tokens kept) or 'decayed' (load = decay * load + pass).
        """

class CudaRecorder(Recorder):
    """
    The recorder for CUDA arrays: every buffer is allocated here, hooks only enqueue kernels on the stream given to set_stream, so they can be captured in a CUDA graph.
    """

    def __init__(self, topology: ModelTopology, *, mode: str = 'stat', window_size: int = 1000, decay: float = 0.95, per_token_capacity: int = 16384, device: int = -1, trace_path: str | os.PathLike | None = None, max_tokens_per_pass: int = 8192) -> None:
        """
        device -1 is the current device; per_token mode drains into trace_path (required there).
        """

    def set_stream(self, stream: int) -> None:
        """
        The stream hooks enqueue on, as a handle: torch.cuda.current_stream().cuda_stream.
        """

    def drain_trace(self) -> None:
        """per_token mode: waits until every ended pass is in the trace file."""

    def pass_count_row(self, layer: int) -> Annotated[Any, dict(dtype='int32', shape=(None,), order='C', device='cuda')]:
        """
        The open pass's count row of a MoE layer, for an engine kernel that adds per-expert token counts itself (SGLang's get_current_pass_count_buffer): int32 [P] on the recorder's GPU, one add per routed (token, k) at its physical id. end_pass folds it into the pass; begin_pass clears it when the pass records, and what is added while no pass records is discarded. torch.from_dlpack(row) or torch.as_tensor(row) views it without a copy; the array keeps the recorder alive. Adds must come on the recorder's stream between begin_pass and end_pass; stat, per_pass and decayed modes only.
        """

def plan_deepseek(loads: Annotated[NDArray, dict(writable=False)], num_replicas: int, num_groups: int, num_nodes: int, num_gpus: int) -> Placement:
    """
    DeepSeek's EPLB (eplb.py rebalance_experts), reproduced exactly, on [layers, experts] loads; returns a Placement. num_replicas: physical slots per layer (a multiple of num_gpus); num_groups divides the experts; num_nodes divides num_gpus. Hierarchical when num_groups % num_nodes == 0, else global, as eplb.py decides.
    """

def plan_moestat(loads: Annotated[NDArray, dict(writable=False)], num_replicas: int, num_groups: int, num_nodes: int, num_gpus: int, *, objective: str = 'expected', max_moves_per_layer: int = 0) -> Placement:
    """
    moestat's planner: the same constraints as plan_deepseek, never worse in-sample on one [layers, experts] matrix; a stack [scenarios, layers, experts] is planned for all of them (objective 'expected' or 'worst_case'). Returns a Placement.
    """

def evaluate_placement(loads: Annotated[NDArray, dict(writable=False)], placement: Placement, num_gpus: int) -> dict:
    """
    Balance of placement under [layers, experts] loads over num_gpus GPUs: a dict of balancedness (SGLang's mean/max), balancedness_sum_ratio (vLLM's), imbalance (TensorRT-LLM's), worst_layer, worst_balancedness and layer_balancedness [L]. Layers without load are left out of the means.
    """

def gpu_loads(physical_counts: Annotated[NDArray, dict(writable=False)], num_gpus: int) -> object:
    """
    [..., slots] counts -> [..., num_gpus] int64 loads: slot p is on GPU p / (slots / num_gpus), as SGLang and vLLM place them. Raises moestat.Error unless num_gpus divides the slots.
    """

def placement_gpu_loads(loads: Annotated[NDArray, dict(writable=False)], placement: Placement, num_gpus: int) -> object:
    """
    [layers, num_gpus] float64: each GPU's load under placement, an expert's load split evenly over its replicas (vLLM's rank loads).
    """

def balancedness_sum_ratio(gpu_loads: Annotated[NDArray, dict(writable=False)]) -> object:
    """
    vLLM's balancedness of [..., layers, gpus] loads: the sum over layers of the mean GPU load over the sum over layers of the max, 0 without load; a float for [layers, gpus], float64 [...] for more axes.
    """

def expert_gini(loads: Annotated[NDArray, dict(writable=False)]) -> float:
    """Mean over loaded layers of the Gini coefficient of the experts' loads."""

def hot_expert_mask(loads: Annotated[NDArray, dict(writable=False)], gpu_experts_per_layer: int, *, strategy: str = 'layer-balanced', seed: int = 0) -> object:
    """
    Which experts live on the GPU in CPU/GPU hybrid inference: [layers, experts] bool, True = GPU, with gpu_experts_per_layer x MoE layers GPU experts in all. strategy: 'uniform', 'front-loading', 'random', 'frequency' (KTransformers') or 'layer-balanced'.
    """

def hot_expert_hit_rate(loads: Annotated[NDArray, dict(writable=False)], mask: Annotated[NDArray, dict(writable=False)]) -> float:
    """Share of the assignments served by experts the mask puts on the GPU."""

def advise_rebalance(placement: Placement, counts: Annotated[NDArray, dict(writable=False)], num_gpus: int, *, seconds_per_balanced_pass: float, horizon_passes: int, num_groups: int = 1, num_nodes: int = 1, bytes_per_expert: float = 0.0, link_bytes_per_second: float = 0.0, seconds_per_expert: float = 0.0, targets: Sequence[float] = [0.85, 0.9, 0.95, 1.0], num_bootstrap: int = 1000, confidence: float = 0.9, seed: int = 0, require_confident_gain: bool = False, min_balancedness_gain: float = 0.005, min_evaluation_passes: int = 3, follow_regimes: bool = True, max_scenarios: int = 4) -> dict:
    """
    Whether rebalancing the placement in force pays for the expert weights it moves, from recent counts [passes, layers, experts] (at least 2 passes with load). A pass's MoE time is seconds_per_balanced_pass / served balancedness; a plan's gain is that time saved over horizon_passes, its cost bytes_per_expert x (most slots one GPU refills) / link_bytes_per_second + seconds_per_expert x slots refilled. Candidates: one movement-aware replan per target. The traffic planned for is the regime running now, or every regime since the current one first ran when it returns (follow_regimes; False: the whole window). Estimates are planned on the older half of its passes and judged on the newer, with a seeded bootstrap interval over passes; fewer than min_evaluation_passes to judge on, or a lift in balancedness below min_balancedness_gain, keeps the placement. Returns a dict: rebalance, reason, balancedness_now {value, low, high}, best, placement (to run), moves [M, 4] int64 (layer, slot, from expert, to expert), candidates (dicts), num_planning_passes, num_evaluation_passes, traffic_first_pass, traffic_regimes, traffic_recurs. See docs/placement.md.
    """

def file_format(path: str | os.PathLike) -> str:
    """
    'json', 'pt', 'safetensors', 'trace' or 'gguf', from the file's first bytes.
    """

def read_counts(path: str | os.PathLike, fractions: bool = False) -> dict:
    """
    Any counts file, as every moestat command reads it: {'counts': [passes, layers, experts] int64 ([layers, experts] when the file has no pass axis), 'has_window_axis': bool, 'pass_ids', 'placement_versions', 'pass_num_tokens': [passes] arrays, or None where the file does not say}. From an SGLang stat, per-pass or per-token dump (.pt), a moestat snapshot, {'logical_count'} or {'expert_popularity'} JSON, a .safetensors file, or llama.cpp's imatrix .gguf (llama-imatrix's per-expert counts). Entries that are not whole numbers are an error unless fractions=True, which reads them as float64 loads. Raises moestat.Error naming the file and the problem.
    """

def read_logical_counts(path: str | os.PathLike) -> object:
    """
    read_counts(path)['counts']: int64 [passes, layers, experts] ([layers, experts] when the file has no pass axis). Raises moestat.Error naming the file and the problem.
    """

def write_logical_counts(path: str | os.PathLike, counts: Annotated[NDArray, dict(writable=False)], *, metadata: str | None = None) -> None:
    """
    Writes [layers, experts] or [passes, layers, experts] counts by extension: .pt an SGLang stat dump, .json {'logical_count'}, .safetensors. metadata: a JSON object's text whose members follow logical_count in a .json file (vLLM's {'vllm_eplb': {...}}); moestat.Error for another extension, or text that is not a JSON object. Atomic.
    """

def read_placement(path: str | os.PathLike, num_logical_experts: int = 0, version: int = 0, num_layers: int = 0, num_physical_experts: int = 0) -> Placement:
    """
    A Placement from {'physical_to_logical_map'} in .pt, .json or .safetensors. num_layers and num_physical_experts (0: any): the [L, P] shape required (a model's), a JSON map refused at its first row or id that breaks it, unread beyond.
    """

def write_placement(path: str | os.PathLike, placement: Placement) -> None:
    """
    Writes {'physical_to_logical_map'} by extension; a .pt is what SGLang's --init-expert-location reads. Atomic.
    """

def write_sglang_dump(snapshot: Snapshot, placement: Placement, rank: int = 0, directory: str | os.PathLike | None = None, *, passes: dict | None = None, map_device: str = 'cpu') -> pathlib.Path:
    """
    Writes the SGLang dump of the snapshot's mode (stat, per_pass or per_token) named and placed as SGLang names it (directory None: $SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR, else /tmp). passes: {pass_id: {'forward_pass_id': int, 'metadata': dict or None, 'misc_objects': list}}, what the engine said of each recorded pass: per_pass and per_token records are then exactly SGLang's (forward_pass_id, the batch metadata, misc_objects, one per-token record per pass, as many tokens as its input_ids). map_device: 'cpu' or 'cuda:N', where the engine keeps last_physical_to_logical_map (a stat dump's logical_count), written as torch.save writes it. Returns the path.
    """

def sglang_dump_bytes(snapshot: Snapshot, placement: Placement, rank: int = 0, *, passes: dict | None = None, map_device: str = 'cpu') -> bytes:
    """
    The bytes write_sglang_dump writes (torch.load reads them from io.BytesIO).
    """

def sglang_stat_dump_bytes(logical_count: Annotated[NDArray, dict(writable=False)], rank: int = 0, *, average_utilization: float | None = None, device: str = 'cpu', eplb_balancedness: list[float] | None = None) -> bytes:
    """
    SGLang's stat dump of logical_count ([buffer, layers, experts] counts, laid out as SGLang's buffer), as the bytes of a .pt file: {'rank', 'logical_count' int32 on device ('cpu' or 'cuda:N', written as torch.save writes it), 'average_utilization_rate_over_window'} and, given eplb_balancedness, that list as a float32 tensor under 'eplb_balancedness'.
    """

class HotExpert:
    """A logical expert of a layer and its assignments."""

    @property
    def layer(self) -> int: ...

    @property
    def expert(self) -> int: ...

    @property
    def assignments(self) -> int: ...

    def __repr__(self) -> str: ...

class BalancednessMean:
    """The mean balancedness of the latest passes."""

    @property
    def window(self) -> int:
        """passes it is over at most"""

    @property
    def num_passes(self) -> int:
        """passes it is over now"""

    @property
    def value(self) -> float: ...

class MetricValues:
    """What one LiveMetrics.update() read."""

    @property
    def num_layers(self) -> int: ...

    @property
    def num_gpus(self) -> int: ...

    @property
    def layer_names(self) -> list[str]: ...

    @property
    def passes_recorded(self) -> int: ...

    @property
    def passes_observed(self) -> int: ...

    @property
    def passes_unobserved(self) -> int: ...

    @property
    def passes_dropped(self) -> int: ...

    @property
    def dropped_ids(self) -> int: ...

    @property
    def last_pass_id(self) -> int: ...

    @property
    def last_pass_balancedness(self) -> float: ...

    @property
    def last_pass_gpu_loads(self) -> object:
        """[L, G] int64 assignments per GPU in the latest observed pass"""

    @property
    def gpu_assignments_total(self) -> object:
        """[L, G] int64 assignments per GPU over every observed pass"""

    @property
    def balancedness_means(self) -> list[BalancednessMean]:
        """over the latest 10, 100 and 1000 passes"""

    @property
    def uncovered_passes(self) -> object:
        """
        [L] int64 passes in which the MoE layer counted nothing while others counted
        """

    def uncovered_layers(self) -> list[str]:
        """Names of the layers with uncovered passes."""

    @property
    def hottest_experts(self) -> list[HotExpert]: ...

class LiveMetrics:
    """
    Live metrics of a recorder (stat, stat_approx or per_pass mode), from its new passes.
    """

    def __init__(self, recorder: Recorder, *, num_gpus: int = 0, num_hottest_experts: int = 10, layer_names: Sequence[str] = []) -> None:
        """
        num_gpus 0 takes the topology's ep_size; layer_names (empty: indices) label layers.
        """

    def update(self) -> MetricValues:
        """
        Folds the passes recorded since the last update; returns the MetricValues.
        """

def prometheus_text(values: MetricValues) -> str:
    """The Prometheus text exposition (format 0.0.4) of MetricValues."""

def write_prometheus_file(path: str | os.PathLike, values: MetricValues) -> None:
    """Writes prometheus_text(values) to path atomically."""

prometheus_content_type: str = 'text/plain; version=0.0.4; charset=utf-8'

class MetricsServer:
    """
    Serves GET /metrics (Prometheus text of LiveMetrics.update()) from a thread of its own.
    """

    def __init__(self, metrics: LiveMetrics, *, host: str = '127.0.0.1', port: int = 0, max_connections: int = 64, max_connections_per_client: int = 8, request_timeout: float = 10.0, max_header_bytes: int = 8192, max_header_count: int = 100) -> None:
        """
        port 0 picks a free port; another host than loopback exposes the metrics. At most max_connections at once, max_connections_per_client of one client address (503 beyond; at max_connections a new client takes the place of an idle connection of an address holding more); each closed request_timeout seconds after it was accepted; request heads over max_header_bytes or max_header_count are 431.
        """

    @property
    def port(self) -> int: ...

    @property
    def host(self) -> str: ...

    def stop(self) -> None:
        """Stops serving; idempotent."""

    def __enter__(self) -> MetricsServer: ...

    def __exit__(self, exc_type: object | None, exc_value: object | None, traceback: object | None) -> None: ...

class RouteLayout:
    """
    What the columns of a route row are: the decoder layer of each (the MoE layers, ascending), the experts and top_k.
    """

    def __init__(self, num_decoder_layers: int, layers: Sequence[int], num_experts: int, top_k: int) -> None: ...

    @staticmethod
    def of(topology: ModelTopology) -> RouteLayout:
        """The MoE layers, logical experts and top_k of a ModelTopology."""

    @property
    def num_decoder_layers(self) -> int: ...

    @property
    def layers(self) -> list[int]: ...

    @property
    def num_experts(self) -> int: ...

    @property
    def top_k(self) -> int: ...

    @property
    def num_columns(self) -> int: ...

    @property
    def id_dtype(self) -> object:
        """
        The numpy dtype of the ids: uint8 up to 256 experts, uint16 up to 65536, int32.
        """

    @property
    def bytes_per_token(self) -> int:
        """Bytes one token's routes take: ids plus one validity byte per layer."""

    def column_of(self, layer: int) -> int:
        """The column of decoder layer `layer`; -1 when it is not a MoE layer."""

    def __eq__(self, arg: RouteLayout, /) -> bool: ...

    def __repr__(self) -> str: ...

class PendingSlots:
    """
    Slot keys: a pass ended by end_pass_pending(), whose rows wait for commit_slots() or release_pending().
    """

    @property
    def id(self) -> int: ...

    @property
    def num_tokens(self) -> int:
        """Slots commit_slots() takes."""

    @property
    def tokens_without_room(self) -> int:
        """Of them, tokens given no row: their slots will read as not recorded."""

    def __repr__(self) -> str: ...

class RoutedExperts:
    """
    The routes of tokens [first_position, first_position + num_tokens) of one request: per token and MoE layer, the top_k logical expert ids, and whether they were recorded.
    """

    def __init__(self, layout: RouteLayout, ids: object, valid: object | None = None, *, request_id: str = '', first_position: int = 0, model: str = '', placement_version: int = 0) -> None:
        """
        ids: integer [tokens, layout.num_columns, top_k] logical ids; valid: bool [tokens, num_columns] or None (all recorded); ids of rows not valid must be 0.
        """

    @property
    def ids(self) -> object:
        """[tokens, MoE layers, top_k] of layout.id_dtype (a copy)."""

    @property
    def valid(self) -> object:
        """[tokens, MoE layers] bool (a copy)."""

    @property
    def request_id(self) -> str: ...

    @property
    def first_position(self) -> int: ...

    @property
    def layout(self) -> RouteLayout: ...

    @property
    def model(self) -> str: ...

    @property
    def placement_version(self) -> int: ...

    @property
    def num_tokens(self) -> int: ...

    @property
    def complete(self) -> bool:
        """Whether every token of every layer was recorded."""

    def slice(self, begin: int, end: int) -> RoutedExperts:
        """Rows [begin, end) as routes of their own."""

    def append(self, next: RoutedExperts) -> None:
        """Appends the rows of the same request that follow these."""

    def __len__(self) -> int: ...

    def __eq__(self, arg: RoutedExperts, /) -> bool: ...

    def __repr__(self) -> str: ...

def write_routes(path: object, routes: Sequence[RoutedExperts]) -> None:
    """
    Writes requests' routes (one layout) as a routes file, atomically (docs/formats.md).
    """

def read_routes(path: object) -> list[RoutedExperts]:
    """The requests of a routes file."""

class RouteRecorder:
    """
    Records each request's routes by position (docs/routing-replay.md). Hooks: begin_pass, record_topk(_layers), end_pass(batch); take/finish hand out rows of ended passes.
    """

    def begin_pass(self) -> None:
        """Opens a pass."""

    def record_topk(self, layer: int, topk_ids: object) -> None:
        """
        Keeps a layer's [rows, >= top_k] int32/int64 PHYSICAL ids for the pass's tokens.
        """

    def record_topk_layers(self, layers: Sequence[int], topk_ids: Sequence[object]) -> None:
        """record_topk for several layers (one CUDA launch per 64)."""

    def end_pass(self, batch: object) -> None:
        """
        Closes the pass: (request_id, first_position, num_tokens[, first_row]) spans say which batch rows are which request's positions (first_row omitted: after the previous span); rows no span covers are padding. A span ends at position 2**62 at most, and the gaps a request's spans leave between two takes span capacity_tokens positions at most; a batch that breaks a rule raises moestat.Error and changes nothing.
        """

    def end_pass_slots(self, slots: Sequence[int]) -> None:
        """
        Slot keys: closes the pass; batch row t goes to slot slots[t] (-1: not recorded).
        """

    def end_pass_pending(self, first_row: int, num_tokens: int) -> PendingSlots:
        """
        Slot keys: closes the pass; batch rows [first_row, first_row + num_tokens) go to rows of their own until commit_slots() gives them their slots (SGLang's overlap scheduler knows a forward's KV slots only after the next forward is launched).
        """

    def commit_slots(self, pending: PendingSlots, slots: Sequence[int]) -> dict:
        """
        Slot keys: the pending pass's token t now holds slot slots[t]; the rows the slots held are freed. Slots outside [0, num_slots) and all but the last token naming a slot are not committed: {'slots_out_of_range': n, 'slots_repeated': n}.
        """

    def release_pending(self, pending: PendingSlots) -> bool:
        """
        Slot keys: frees a pending pass's rows (a forward the engine dropped); False when it was committed or released already.
        """

    def clear_slots(self, slots: Sequence[int]) -> int:
        """
        Slot keys: `slots` now read as not recorded (their tokens' routes were lost), never as their previous tokens; returns how many were outside [0, num_slots).
        """

    def read_slots(self, slots: Sequence[int], request_id: str = '', first_position: int = 0) -> RoutedExperts:
        """
        Slot keys: the rows of `slots` in order (-1 or never written: not valid).
        """

    def abort_pass(self) -> None: ...

    def take(self, request_id: str) -> RoutedExperts:
        """
        The request's rows of ended passes not taken yet (and frees them), from its first position a pass routed; positions between routed ones come back not valid.
        """

    def finish(self, request_id: str) -> RoutedExperts:
        """take(), then forgets the request."""

    def take_many(self, request_ids: Sequence[str]) -> list[RoutedExperts]:
        """
        take() of each request, in order, their rows read in one go (CUDA: one copy and one wait for them all); a request named twice gets its rows the first time.
        """

    def finish_many(self, request_ids: Sequence[str]) -> list[RoutedExperts]:
        """take_many(), then forgets the requests."""

    def set_placement(self, placement: Placement) -> None:
        """The placement that maps physical ids of passes beginning from now on."""

    def set_model(self, model: str) -> None:
        """Names the model in every RoutedExperts handed out."""

    def requests(self) -> list[str]: ...

    def tallies(self) -> dict:
        """
        What the recorder did: passes, tokens_recorded, tokens_without_room, tokens_already_taken, invalid_ids, layers_written_twice, tokens_held.
        """

    @property
    def layout(self) -> RouteLayout: ...

    @property
    def topology(self) -> ModelTopology: ...

    @property
    def capacity_bytes(self) -> int: ...

    @property
    def max_tokens_per_pass(self) -> int: ...

    @property
    def capacity_tokens(self) -> int: ...

class CpuRouteRecorder(RouteRecorder):
    """The route recorder for host arrays."""

    def __init__(self, topology: ModelTopology, *, max_tokens_per_pass: int = 8192, capacity_tokens: int = 65536, keys: str = 'requests', num_slots: int = 0) -> None: ...

class CudaRouteRecorder(RouteRecorder):
    """
    The route recorder for CUDA arrays, on the current device: layer hooks only enqueue a kernel (capturable in a CUDA graph); begin_pass/end_pass run on the host around replays.
    """

    def __init__(self, topology: ModelTopology, *, max_tokens_per_pass: int = 8192, capacity_tokens: int = 65536, keys: str = 'requests', num_slots: int = 0) -> None: ...

    def set_stream(self, stream: int) -> None:
        """
        The stream hooks and begin/end_pass enqueue on: torch.cuda.current_stream().cuda_stream.
        """
