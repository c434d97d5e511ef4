"""moestat.vllm on a GPU against vLLM 0.33.0's own code (skipped without CUDA or vLLM).

1. Recording under a CUDA graph: vllm_stand_in_model.py's model on the GPU with vLLM's own
   routers (grouped top-k with a correction bias, and a custom routing function: both route
   in torch, so vLLM's compiled kernels, vllm._C, are not needed) and EPLB on: each layer has an
   EplbLayerState whose placement replicates some experts, so vLLM's own Triton kernel
   (base_router.py, _eplb_map_and_record_triton) maps the ids to physical slots and records
   its load, padding rows left out through num_unpadded_tokens_tensors. moestat's
   CudaRecorder (recording.attach) records in the same captured graph, eagerly captured and
   compiled by inductor. Each replay's counts must equal a tally of the physical ids vLLM
   returned, mapped back to logical experts, and their sum vLLM's own recorded load.
2. vLLM's EplbState on the GPU in async mode (its default) over a one-process NCCL world: it
   plans with moestat's policy and moves the expert weights to match the new map.

Where vLLM's compiled kernels do not load (they are built for the torch vLLM pins), vLLM's
CUDA platform does not either: vllm_gpu_platform.select() then runs vLLM under its CPU
platform with the tensors on the GPU and vLLM's own Triton EPLB kernel defined as its CUDA
platform defines it, so 1 runs; 2, whose EplbState moves weights through the CUDA platform's
communicators, is skipped and says so. Run in a pytest process of its own (run_device_vllm.sh):
vLLM keeps one platform per process.
"""
import os
import pathlib
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

os.environ.setdefault("VLLM_USE_FUSED_MOE_GROUPED_TOPK", "0")  # grouped top-k in torch
try:
    import vllm_gpu_platform
    PLATFORM = vllm_gpu_platform.select()  # before any other vLLM module reads the platform
except Exception as error:  # pragma: no cover - vLLM absent
    pytest.skip(f"vLLM's platforms do not import: {error!r}", allow_module_level=True)

import vllm_harness  # noqa: E402 - vLLM's modules, or a skip
from vllm_harness import restore_policies, installed_entry_point  # noqa: E402,F401 - fixtures

try:
    from vllm.distributed.eplb.eplb_state import EplbLayerState, EplbState, compute_logical_maps
    from vllm.model_executor.layers.fused_moe.router.router_factory import (
        create_fused_moe_router)
    from vllm_stand_in_model import (HIDDEN, MOE_LAYERS, NUM_EXPERTS, NUM_LAYERS, TOP_K,
                                     Model)
except Exception as error:  # pragma: no cover - vLLM without its router modules' imports
    pytest.skip(f"vLLM's router modules do not import: {error!r}", allow_module_level=True)

import moestat  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import hf_step_cost  # noqa: E402 (bench/ is not a package): its CUDA graph capture
from moestat.vllm import recording  # noqa: E402
from moestat.vllm.eplb_policy import MoestatEplbPolicy  # noqa: E402

DEVICE = torch.device("cuda")
PADDED = 16                  # the captured batch
REAL_TOKENS = [5, 16, 1, 9]  # what each replay's batch really holds
# slots 16-19 replicate experts 0, 3, 3 and 9: vLLM spreads their tokens over the replicas
PHYSICAL_TO_LOGICAL = torch.cat([torch.arange(NUM_EXPERTS), torch.tensor([0, 3, 3, 9])])


def custom_topk(hidden_states, gating_output, topk, renormalize):
    """A custom routing function, as vLLM's CustomRoutingRouter calls one."""
    weights, ids = torch.topk(gating_output.softmax(dim=-1), topk, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids.to(torch.int32)


class EplbLayers:
    """The EplbLayerState of every MoE layer, as EplbState.add_model shares them: one load row
    per layer, the maps of PHYSICAL_TO_LOGICAL, one device scalar of unpadded tokens."""

    def __init__(self):
        physical = len(PHYSICAL_TO_LOGICAL)
        self.load = torch.zeros(NUM_LAYERS, physical, dtype=torch.int32, device=DEVICE)
        logical_to_physical, replicas = compute_logical_maps(
            PHYSICAL_TO_LOGICAL.unsqueeze(0), NUM_EXPERTS)
        self.logical_to_physical = logical_to_physical[0].to(DEVICE)
        self.replicas = replicas[0].to(DEVICE)
        self.record = torch.ones((), dtype=torch.bool, device=DEVICE)
        self.num_unpadded = torch.zeros((), dtype=torch.int32, device=DEVICE)

    def state(self, layer):
        return EplbLayerState(expert_load_view=self.load[layer],
                              logical_to_physical_map=self.logical_to_physical,
                              logical_replica_count=self.replicas,
                              should_record_tensor=self.record,
                              num_unpadded_tokens_tensors=[self.num_unpadded])

    def router(self, layer):
        if layer == 2:  # DeepSeek-style
            return create_fused_moe_router(
                top_k=TOP_K, global_num_experts=NUM_EXPERTS, use_grouped_topk=True,
                num_expert_group=4, topk_group=2, scoring_func="sigmoid",
                e_score_correction_bias=torch.linspace(-0.1, 0.1, NUM_EXPERTS, device=DEVICE),
                eplb_state=self.state(layer))
        return create_fused_moe_router(top_k=TOP_K, global_num_experts=NUM_EXPERTS,
                                       custom_routing_function=custom_topk,
                                       eplb_state=self.state(layer))


def logical_tally(physical_ids):
    """[experts]: the tokens of physical_ids, each at its logical expert."""
    logical = PHYSICAL_TO_LOGICAL[physical_ids.long().cpu().reshape(-1)]
    return np.bincount(logical.numpy(), minlength=NUM_EXPERTS)


def compiled_as_vllm_does(forward):
    """torch.compile as vLLM's compilation wrapper calls it (vllm/compilation/wrapper.py):
    whole graph, static shapes, every guard dropped, so the code compiled at the warm-up is the
    code captured. With torch's own guards a capture after this warm-up compiled again (inside
    the capture, which fails); the guard it failed was not found."""
    return torch.compile(forward, fullgraph=True, dynamic=False,
                         options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe})


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "inductor"])
def test_a_captured_graph_records_what_vllm_routes_and_what_vllm_records(compiled):
    torch._dynamo.reset()
    layers = EplbLayers()
    model = Model(seed=7, router=layers.router).to(DEVICE)
    recorder = moestat.CudaRecorder(recording.topology_from_model(model, NUM_LAYERS))
    handle = recording.attach(model, recorder, passes=False)
    forward = compiled_as_vllm_does(model.forward) if compiled else model.forward
    hidden = torch.zeros(PADDED, HIDDEN, device=DEVICE)

    def step():
        handle.begin_pass()
        forward(hidden)
        handle.end_pass()

    with torch.no_grad():
        # warm-up (and compilation) on a side stream, the recorder off: nothing is counted
        layers.num_unpadded.fill_(PADDED)
        graph = hf_step_cost.captured(step)
        # the ids each layer returns at every replay (the graph's own output tensors)
        returned = {layer: moe.routed[-1] for layer, moe in model.moe().items()}

        layers.load.zero_()
        recorder.start()
        generator = torch.Generator(device=DEVICE).manual_seed(8)
        expected = np.zeros((len(REAL_TOKENS), NUM_LAYERS, NUM_EXPERTS), np.int64)
        for call, real in enumerate(REAL_TOKENS):
            hidden.copy_(torch.randn(PADDED, HIDDEN, device=DEVICE, generator=generator))
            layers.num_unpadded.fill_(real)
            graph.replay()
            for layer, ids in returned.items():
                assert int(ids.max()) < len(PHYSICAL_TO_LOGICAL)  # physical slots
                expected[call, layer] = logical_tally(ids[:real])
        torch.cuda.synchronize()
    handle.detach()

    snapshot = recorder.snapshot()
    np.testing.assert_array_equal(snapshot.logical_counts, expected)
    assert snapshot.pass_num_tokens.tolist() == REAL_TOKENS
    assert snapshot.dropped_ids == 0
    for layer in MOE_LAYERS:
        assert int(expected[:, layer].sum()) == sum(REAL_TOKENS) * TOP_K
    # vLLM's own load recording, physical slots summed into their logical experts
    vllm_logical = torch.zeros(NUM_LAYERS, NUM_EXPERTS, dtype=torch.int64).index_add_(
        1, PHYSICAL_TO_LOGICAL, layers.load.long().cpu())
    np.testing.assert_array_equal(snapshot.logical_counts.sum(axis=0), vllm_logical.numpy())
    # Over the run (a layer's router may never pick expert 3: the grouped top-k's groups)
    replicated = layers.load.cpu()[list(MOE_LAYERS)][:, [3, 17, 18]].sum(dim=0)
    assert bool((replicated > 0).all()), f"vLLM left a slot of expert 3 unused: {replicated}"


@pytest.fixture
def vllm_nccl_world(tmp_path):
    """vLLM's parallel state over a one-process NCCL world, EPLB on in its default async mode."""
    if PLATFORM != "cuda":
        pytest.skip("vLLM's EplbState moves weights through its CUDA platform's communicators, "
                    "which import vLLM's compiled kernels: absent here")
    from vllm.config import ParallelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state

    if parallel_state.model_parallel_is_initialized():
        pytest.skip("vLLM's parallel state is already set up in this process")
    parallel_config = ParallelConfig(enable_expert_parallel=True, enable_eplb=True)
    eplb_config = parallel_config.eplb_config
    assert eplb_config.use_async
    eplb_config.window_size = 4
    eplb_config.step_interval = 8
    eplb_config.num_redundant_experts = vllm_harness.NUM_REDUNDANT
    vllm_config = VllmConfig(parallel_config=parallel_config)
    torch.cuda.set_device(0)
    with set_current_vllm_config(vllm_config):
        parallel_state.init_distributed_environment(1, 0, f"file://{tmp_path / 'store'}", 0,
                                                    "nccl")
        parallel_state.initialize_model_parallel(backend="nccl")
        yield parallel_config
        parallel_state.destroy_model_parallel()
        parallel_state.destroy_distributed_environment()


def test_async_eplb_on_the_gpu_plans_with_moestat_and_moves_the_weights(
        vllm_nccl_world, restore_policies, installed_entry_point):
    import vllm.plugins

    vllm.plugins.plugins_loaded = False
    vllm.plugins.load_general_plugins()  # the worker does this before building the model
    num_layers, num_experts = vllm_harness.NUM_LAYERS, vllm_harness.NUM_EXPERTS
    state = EplbState(vllm_nccl_world, DEVICE)
    initial = torch.tensor(EplbState.build_initial_global_physical_to_logical_map(
        num_experts, vllm_harness.NUM_REDUNDANT))
    model = vllm_harness.MoeModel(initial)
    for layer in model.moe_layers:
        layer.weight = layer.weight.to(DEVICE)
    state.add_model(model, vllm_harness.MoeModelConfig())
    assert state.policy is MoestatEplbPolicy and state.is_async
    model_state = state.model_states["moestat-test-moe"]

    state.step(is_profile=True)
    MoestatEplbPolicy.keep_current = False  # one rank balances any map: replan anyway
    load = torch.tensor([[50, 1, 1, 1, 30, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 90],
                         [5, 5, 5, 5, 5, 5, 5, 5]], dtype=torch.int32, device=DEVICE)
    start = model_state.physical_to_logical_map.cpu().clone()

    def weights_match(placement):
        return all(torch.equal(model.moe_layers[layer].weight[:, 0].cpu(),
                               placement[layer].double() * 100 + layer)
                   for layer in range(num_layers))

    # async: the plan comes from a background thread and the weights move layer by layer over
    # the next steps; step until the skewed layers' map changed and every slot holds its expert
    for steps in range(1, 200):
        model_state.expert_load_pass.zero_()
        first_slot = model_state.logical_to_physical_map[:, :, 0]
        model_state.expert_load_pass.scatter_add_(1, first_slot, load)
        state.step()
        torch.cuda.synchronize()
        new = model_state.physical_to_logical_map.cpu()
        if not torch.equal(new[0], start[0]) and not torch.equal(new[1], start[1]) and \
                weights_match(new):
            break
    new = model_state.physical_to_logical_map.cpu()
    vllm_harness.assert_valid_for_vllm(new.clone(), num_layers, vllm_harness.NUM_PHYSICAL,
                                       num_experts)
    replicas = torch.zeros(num_layers, num_experts, dtype=torch.int64).scatter_add_(
        1, new, torch.ones_like(new))
    assert int(replicas[0, 0]) > 1 and int(replicas[1, 7]) > 1  # the hot experts got replicas
    assert weights_match(new), f"after {steps} steps a slot's weights are not its expert's"
