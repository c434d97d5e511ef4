"""What the vLLM tests share (test_vllm_eplb_policy.py, test_vllm_offline.py): vLLM's modules
or a skip, moestat's entry point installed as pip would, vLLM's registry restored, and vLLM's
EplbState on CPU in a one-process gloo group with a stand-in MoE model.

Importing it skips the importing test module where vLLM's EPLB modules do not import, unless
vLLM is pinned in requirements-no-deps.txt and MOESTAT_REQUIRE_ENGINE_VENV=1 (CI): then that is
an error.
"""
import importlib
import importlib.metadata
import os
import pathlib
import tomllib

import pytest

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # else vLLM's config cannot infer a device

try:  # what the tests import of vLLM
    import torch
    from vllm.config.parallel import EPLBConfig, EPLBPolicyOption  # noqa: F401
    from vllm.distributed.eplb import policy as eplb_policies
    from vllm.distributed.eplb.policy.abstract import AbstractEplbPolicy  # noqa: F401
    from vllm.distributed.eplb.policy.default import DefaultEplbPolicy  # noqa: F401
except Exception as error:  # vLLM absent, or present without what its EPLB modules import
    pins = (pathlib.Path(__file__).with_name("requirements-no-deps.txt")).read_text().split()
    if os.environ.get("MOESTAT_REQUIRE_ENGINE_VENV") == "1" and any(
            pin.startswith("vllm==") for pin in pins):
        raise
    pytest.skip(f"vLLM's EPLB modules do not import: {error!r}", allow_module_level=True)

import moestat.vllm
from moestat.vllm.eplb_policy import MoestatEplbPolicy

ROOT = pathlib.Path(__file__).resolve().parents[2]


def assert_valid_for_vllm(phy2log, num_layers, num_replicas, num_experts):
    assert isinstance(phy2log, torch.Tensor)
    assert phy2log.dtype == torch.int64 and phy2log.device.type == "cpu"
    assert tuple(phy2log.shape) == (num_layers, num_replicas)
    assert int(phy2log.min()) >= 0 and int(phy2log.max()) < num_experts
    replicas = torch.zeros(num_layers, num_experts, dtype=torch.int64).scatter_add_(
        1, phy2log, torch.ones_like(phy2log))
    assert bool((replicas >= 1).all()), "a logical expert has no replica"
    # vLLM's own inverse (EplbState commits it) agrees
    from vllm.distributed.eplb.eplb_state import compute_logical_maps

    logical_to_physical, counts = compute_logical_maps(phy2log, num_experts)
    assert torch.equal(counts, replicas)


@pytest.fixture
def restore_policies():
    """EPLB_POLICIES, vLLM's plugin flag and the policy's settings as they were."""
    import vllm.plugins

    saved = dict(eplb_policies.EPLB_POLICIES)
    saved_loaded = vllm.plugins.plugins_loaded
    saved_reference = MoestatEplbPolicy.reference_policy
    saved_keep = MoestatEplbPolicy.keep_current
    saved_planner = MoestatEplbPolicy.plan_with_moestat
    yield eplb_policies.EPLB_POLICIES
    eplb_policies.EPLB_POLICIES.clear()
    eplb_policies.EPLB_POLICIES.update(saved)
    vllm.plugins.plugins_loaded = saved_loaded
    MoestatEplbPolicy.reference_policy = saved_reference
    MoestatEplbPolicy.keep_current = saved_keep
    MoestatEplbPolicy.plan_with_moestat = saved_planner


def moestat_entry_point_distribution(directory):
    """A dist-info on sys.path declaring pyproject.toml's vllm.general_plugins entry points,
    as `pip install moestat` would (the tests import moestat from the build tree)."""
    entry_points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    plugins = entry_points["vllm.general_plugins"]
    assert plugins == {"moestat": "moestat.vllm:register"}
    info = directory / "moestat-0.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: moestat\nVersion: 0.0.0\n")
    (info / "entry_points.txt").write_text(
        "[vllm.general_plugins]\n" + "".join(f"{k} = {v}\n" for k, v in plugins.items()))
    return directory


@pytest.fixture
def installed_entry_point(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(moestat_entry_point_distribution(tmp_path)))
    importlib.invalidate_caches()
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    monkeypatch.setenv(moestat.vllm.ENV_SWITCH, "1")
    names = [ep.name for ep in importlib.metadata.entry_points(group="vllm.general_plugins")]
    assert "moestat" in names
    return tmp_path


# --- vLLM's EplbState on CPU, one process, gloo -----------------------------------------------

class CpuEvent:
    """torch.Event(enable_timing=True) has no CPU implementation."""

    def __init__(self, enable_timing=False):
        pass

    def record(self, stream=None):
        pass

    def synchronize(self):
        pass

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def elapsed_time(self, other):
        return 0.0


class CpuStream:
    def synchronize(self):
        pass


NUM_LAYERS, NUM_EXPERTS, NUM_REDUNDANT = 3, 8, 4
NUM_PHYSICAL = NUM_EXPERTS + NUM_REDUNDANT


class MoeLayer:
    """One MoE layer's expert weights: row p holds 100 x the logical expert of slot p (+ layer),
    so after vLLM moves weights each row must again match the map."""

    def __init__(self, layer, phy2log):
        self.layer = layer
        self.weight = (phy2log.double() * 100 + layer).unsqueeze(1).repeat(1, 4).contiguous()

    def get_expert_weights(self):
        return [self.weight]

    def set_eplb_state(self, **kwargs):
        self.eplb = kwargs


class MoeModel:
    """The MixtureOfExperts protocol (vllm/model_executor/models/interfaces.py) EplbState uses."""
    num_moe_layers = NUM_LAYERS
    num_expert_groups = 1
    num_logical_experts = NUM_EXPERTS
    num_physical_experts = NUM_PHYSICAL
    num_local_physical_experts = NUM_PHYSICAL
    num_routed_experts = NUM_EXPERTS
    num_shared_experts = 0
    num_redundant_experts = NUM_REDUNDANT

    def __init__(self, initial):
        self.moe_layers = [MoeLayer(layer, initial) for layer in range(NUM_LAYERS)]

    def set_eplb_state(self, expert_load_view, logical_to_physical_map, logical_replica_count):
        self.expert_weights = [layer.get_expert_weights() for layer in self.moe_layers]
        for index, layer in enumerate(self.moe_layers):
            layer.set_eplb_state(moe_layer_idx=index, expert_load_view=expert_load_view,
                                 logical_to_physical_map=logical_to_physical_map,
                                 logical_replica_count=logical_replica_count)

    def update_physical_experts_metadata(self, num_physical_experts, num_local_physical_experts):
        pass


class MoeModelConfig:
    model = "moestat-test-moe"

    def compute_hash(self):
        return "moestat-test-moe"


@pytest.fixture(scope="module")
def vllm_gloo_world(tmp_path_factory):
    """vLLM's parallel state over a one-process gloo group, EPLB enabled (set after the config
    is built: vLLM's validation refuses EPLB on CPU), synchronous (async needs a GPU stream)."""
    from vllm.config import ParallelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state

    if parallel_state.model_parallel_is_initialized():
        pytest.skip("vLLM's parallel state is already set up in this process")
    parallel_config = ParallelConfig(enable_expert_parallel=True)
    vllm_config = VllmConfig(parallel_config=parallel_config)
    parallel_config.enable_eplb = True
    eplb_config = parallel_config.eplb_config
    eplb_config.use_async = False
    eplb_config.communicator = "torch_gloo"
    eplb_config.window_size = 4
    eplb_config.step_interval = 8
    eplb_config.num_redundant_experts = NUM_REDUNDANT
    store = tmp_path_factory.mktemp("vllm-gloo") / "store"
    with set_current_vllm_config(vllm_config):
        parallel_state.init_distributed_environment(1, 0, f"file://{store}", 0, "gloo")
        parallel_state.initialize_model_parallel(backend="gloo")
        yield parallel_config
        parallel_state.destroy_model_parallel()
        parallel_state.destroy_distributed_environment()


def cpu_stand_ins(monkeypatch):
    """What EplbState.rearrange needs of an accelerator, on the CPU."""
    monkeypatch.setattr(torch, "Event", CpuEvent)
    monkeypatch.setattr(torch.accelerator, "current_stream", lambda *args: CpuStream())


def initial_map():
    """vLLM's starting map of one layer: the experts in order, then the redundant slots."""
    from vllm.distributed.eplb.eplb_state import EplbState

    return torch.tensor(EplbState.build_initial_global_physical_to_logical_map(
        NUM_EXPERTS, NUM_REDUNDANT))


def new_eplb_state(parallel_config):
    """(EplbState, stand-in model, its EplbModelState), built as a worker builds them after
    loading the model: the policy is whatever vLLM's registry holds now."""
    from vllm.distributed.eplb.eplb_state import EplbState

    state = EplbState(parallel_config, torch.device("cpu"))
    model = MoeModel(initial_map())
    state.add_model(model, MoeModelConfig())
    return state, model, state.model_states["moestat-test-moe"]


def assert_weights_follow_the_map(model, model_state):
    """Every slot's weights are those of the expert the committed map puts there."""
    new = model_state.physical_to_logical_map
    for layer in range(NUM_LAYERS):
        assert torch.equal(model.moe_layers[layer].weight[:, 0], new[layer].double() * 100 + layer)
