"""Shared fixtures of the engine tests (run by ctest in .venv-engines; see CMakeLists.txt)."""
import os
import pathlib

import pytest


@pytest.fixture(scope="session")
def single_process_group(tmp_path_factory):
    """torch.distributed as a one-process group (SGLang's recorder all-reduces its dump).
    Left as found when the process already has a group."""
    import torch.distributed as dist

    created = False
    if not dist.is_initialized():
        store = tmp_path_factory.mktemp("gloo") / "store"
        # SGLang reduces CUDA tensors when it runs on a GPU: NCCL for those, gloo for the rest.
        import torch

        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, rank=0, world_size=1, init_method=f"file://{store}")
        created = True
    yield dist.group.WORLD
    if created:
        dist.destroy_process_group()


@pytest.fixture
def sglang_recorder_module():
    """(SGLang's real expert_distribution module, the harness's config), the config reset to
    its defaults before and after the test."""
    import sglang_harness

    module, config = sglang_harness.load_sglang_expert_distribution()
    config.reset()
    yield module, config
    config.reset()


@pytest.fixture
def shared_dir():
    """The workplace's shared data and golden outputs; tests that need them skip without."""
    path = pathlib.Path(os.environ.get("MOESTAT_SHARED", pathlib.Path(__file__).parents[3] / "shared"))
    if not path.is_dir():
        pytest.skip(f"no shared data at {path}")
    return path
