"""Shared fixtures of the Python package's tests (run by ctest as `python_package`)."""
import os
import pathlib

import numpy as np
import pytest


@pytest.fixture
def shared_dir():
    """The workplace's shared data and golden outputs; tests that need them skip without."""
    path = pathlib.Path(os.environ.get("MOESTAT_SHARED", pathlib.Path(__file__).parents[3] / "shared"))
    if not (path / "golden" / "eplb_reference.json").exists():
        pytest.skip(f"no shared data at {path}")
    return path


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def random_topk(rng, num_tokens, num_experts, top_k, dtype=np.int64):
    """[num_tokens, top_k] distinct expert ids per row."""
    return np.stack([rng.choice(num_experts, size=top_k, replace=False) for _ in range(num_tokens)]).astype(dtype)
