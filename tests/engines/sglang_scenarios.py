"""Randomised call sequences that SGLang's recorder and moestat's are both driven with.

A scenario is a list of operations, the calls SGLang's model runner, MoE layers, EPLB
manager and HTTP endpoints make: start/stop/dump, forward passes with per-layer hooks
(top-k ids with padding, DeepEP counts, disabled regions, debug names, the fused kernel's
count buffer), passes while not recording and hooks outside any pass. ``drive`` applies
one operation to one recorder; ``assert_same_dump`` compares what two recorders dumped,
key for key and element for element.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np
import torch

import sglang_harness


@dataclasses.dataclass
class Setup:
    """One recorder configuration (SGLang's server arguments) and model shape."""

    mode: str
    buffer_size: int = 1000
    moe_a2a_backend: str = "none"
    deepep_mode: str = "auto"
    report_mode: str = "off"
    threshold: float = 1.0
    num_layers: int = 4
    num_logical: int = 8
    num_physical: int = 12
    top_k: int = 2
    chunked_prefill_size: int = 64
    device: str = "cpu"

    def configure(self, config, *, attn_tp_rank=0, attn_tp_size=1):
        moe = config.exec.moe
        moe.expert_distribution_recorder_mode = self.mode
        moe.expert_distribution_recorder_buffer_size = self.buffer_size
        moe.moe_a2a_backend = self.moe_a2a_backend
        moe.deepep_mode = self.deepep_mode
        moe.expert_balancedness_report_mode = self.report_mode
        moe.eplb_min_rebalancing_utilization_threshold = self.threshold
        config.schedule.chunked_prefill_size = self.chunked_prefill_size
        config.device.device = self.device
        config.parallel.attn_tp_rank = attn_tp_rank
        config.parallel.attn_tp_size = attn_tp_size

    @property
    def source(self) -> str:
        """Which hook counts for this setup (SGLang's gatherer choice)."""
        if self.mode == "per_token":
            return "per_token"
        if self.mode == "stat_approx":
            return "deepep_normal"
        if self.low_latency_dispatch:
            return "deepep_low_latency"
        return "select_experts"

    @property
    def low_latency_dispatch(self) -> bool:
        """Whether the all-to-all reports DeepEP low-latency counts (mori does too)."""
        return self.moe_a2a_backend == "mori" or (
            self.moe_a2a_backend == "deepep" and self.deepep_mode == "low_latency")


def placement_map(setup, rng):
    """A non-trivial [L, P] map holding every logical expert in every layer."""
    rows = []
    for _ in range(setup.num_layers):
        row = np.concatenate([rng.permutation(setup.num_logical),
                              rng.integers(0, setup.num_logical, setup.num_physical - setup.num_logical)])
        rows.append(rng.permutation(row))
    return torch.tensor(np.stack(rows), dtype=torch.int64)


def make_scenario(setup, rng, *, ep_size=1, num_steps=24, allow_dumps=True):
    """A list of operations; the control operations depend only on ``rng``'s first draws so
    that every rank, seeded alike for control, calls collectives in the same order."""
    ops = [("start",)]
    for step in range(num_steps):
        roll = rng.random()
        if roll < 0.06:
            ops.append(("stop",))
        elif roll < 0.12:
            ops.append(("start",))
        elif roll < 0.18 and allow_dumps:
            ops.append(("dump", "object" if setup.mode in ("stat", "stat_approx") else "file"))
        elif roll < 0.22:
            ops.append(("outside_pass", int(rng.integers(setup.num_layers))))
        ops.append(("pass", 1000 + step))
    ops.append(("dump", "file"))
    if setup.mode in ("stat", "stat_approx"):
        ops.append(("dump", "object"))
    return ops


def pass_events(setup, rng, ep_size):
    """The hooks of one forward pass, layer by layer, with their data."""
    num_tokens = int(rng.integers(1, 9))
    events = []
    local_slots = setup.num_physical // ep_size
    for layer in range(setup.num_layers):
        if rng.random() < 0.15:
            continue  # a dense layer: no hook
        ids = _topk_ids(setup, rng, num_tokens)
        wrap = "plain"
        roll = rng.random()
        if roll < 0.1:
            wrap = "disabled"
        elif roll < 0.2:
            wrap = "debug_name"
        if setup.source == "select_experts" and rng.random() < 0.15:
            events.append(dict(layer=layer, wrap=wrap, kind="count_buffer", ids=ids))
            continue
        events.append(dict(layer=layer, wrap=wrap, kind="select", ids=ids))
        if setup.low_latency_dispatch:
            counts = torch.tensor(rng.integers(0, 6, local_slots), dtype=torch.int32,
                                  device=setup.device)
            events.append(dict(layer=layer, wrap=wrap, kind="low_latency", counts=counts))
        if setup.moe_a2a_backend == "deepep" and setup.deepep_mode == "normal":
            for _ in range(int(rng.integers(1, 3))):  # normal dispatch may come in chunks
                counts = [int(c) for c in rng.integers(0, 6, local_slots)]
                events.append(dict(layer=layer, wrap=wrap, kind="normal", counts=counts,
                                   per_rank=torch.tensor(rng.integers(0, 9, ep_size)),
                                   per_expert=torch.tensor(rng.integers(0, 9, setup.num_physical))))
    return num_tokens, events


def _topk_ids(setup, rng, num_tokens):
    ids = np.stack([rng.choice(setup.num_physical, setup.top_k, replace=False)
                    for _ in range(num_tokens)])
    padding = rng.random(ids.shape) < 0.1
    ids[padding] = -1
    if setup.mode != "per_token":  # SGLang's per-token gatherer cannot take them (docs/sglang.md)
        foreign = rng.random(ids.shape) < 0.05  # fused shared-expert columns: ids >= P
        ids[foreign] = setup.num_physical + rng.integers(0, 3, int(foreign.sum()))
    dtype = torch.int32 if rng.random() < 0.5 else torch.int64
    return torch.tensor(ids, dtype=dtype, device=setup.device)


class Driver:
    """Applies operations to one recorder; data comes from the caller so that two drivers
    given the same operation see the same tensors."""

    def __init__(self, recorder, setup, dump_dir):
        self.recorder = recorder
        self.setup = setup
        self.dump_dir = dump_dir
        self.objects = []

    def control(self, op, monkeypatch_env):
        name = op[0]
        if name == "start":
            self.recorder.start_record()
        elif name == "stop":
            self.recorder.stop_record()
        elif name == "dump":
            monkeypatch_env(str(self.dump_dir))
            self.objects.append(self.recorder.dump_record(output_mode=op[1]))

    def forward_pass(self, pass_id, num_tokens, events):
        batch = sglang_harness.make_forward_batch(num_tokens, "extend", device=self.setup.device)
        with self.recorder.with_forward_pass(pass_id, batch):
            for event in events:
                self.hook(event)

    def hook(self, event):
        recorder = self.recorder
        with recorder.with_current_layer(event["layer"]):
            if event["wrap"] == "disabled":
                with recorder.disable_this_region():
                    self._call(event)
            elif event["wrap"] == "debug_name":
                with recorder.with_debug_name("draft"):
                    self._call(event)
            else:
                self._call(event)

    def _call(self, event):
        recorder = self.recorder
        kind = event["kind"]
        if kind == "select":
            recorder.on_select_experts(topk_ids=event["ids"])
        elif kind == "count_buffer":
            row = recorder.get_current_pass_count_buffer(event["layer"])
            if row is not None:  # what SGLang's fused kernel does with the row
                ids = event["ids"].reshape(-1).long()
                ids = ids[(ids >= 0) & (ids < row.shape[0])]
                row.index_add_(0, ids, torch.ones_like(ids, dtype=row.dtype))
            else:
                recorder.on_select_experts(topk_ids=event["ids"])
        elif kind == "low_latency":
            recorder.on_deepep_dispatch_low_latency(event["counts"])
        elif kind == "normal":
            recorder.on_deepep_dispatch_normal(
                event["counts"], num_tokens_per_rank=event["per_rank"],
                num_tokens_per_rdma_rank=None, num_tokens_per_expert=event["per_expert"])


def run_both(setup, ops, recorders, dump_dirs, rng, *, ep_size, set_dump_dir):
    """Drives every recorder with ``ops`` (pass data drawn from ``rng``); returns the drivers."""
    drivers = [Driver(recorder, setup, directory) for recorder, directory in zip(recorders, dump_dirs)]
    for op in ops:
        if op[0] == "pass":
            num_tokens, events = pass_events(setup, rng, ep_size)
            for driver in drivers:
                driver.forward_pass(op[1], num_tokens, events)
        elif op[0] == "outside_pass":
            ids = _topk_ids(setup, rng, 3)
            for driver in drivers:
                driver.hook(dict(layer=op[1], wrap="plain", kind="select", ids=ids))
        else:
            for driver in drivers:
                driver.control(op, set_dump_dir)
    return drivers


def assert_same_dump(theirs, ours, path="dump", extra_keys=()):
    """Key for key, element for element: dtypes, shapes, devices and values."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), f"{path}: {type(ours).__name__} where SGLang has a dict"
        our_keys = [key for key in ours if key not in extra_keys]
        assert our_keys == list(theirs), f"{path}: keys {our_keys} where SGLang has {list(theirs)}"
        for key in theirs:
            assert_same_dump(theirs[key], ours[key], f"{path}[{key!r}]")
    elif isinstance(theirs, (list, tuple)):
        assert type(ours) is type(theirs), f"{path}: {type(ours).__name__} vs {type(theirs).__name__}"
        assert len(ours) == len(theirs), f"{path}: {len(ours)} items where SGLang has {len(theirs)}"
        for index, (a, b) in enumerate(zip(theirs, ours)):
            assert_same_dump(a, b, f"{path}[{index}]")
    elif isinstance(theirs, torch.Tensor):
        assert isinstance(ours, torch.Tensor), f"{path}: {type(ours).__name__} where SGLang has a tensor"
        assert ours.dtype == theirs.dtype, f"{path}: dtype {ours.dtype} vs SGLang's {theirs.dtype}"
        assert ours.shape == theirs.shape, f"{path}: shape {tuple(ours.shape)} vs {tuple(theirs.shape)}"
        assert ours.device.type == theirs.device.type, f"{path}: device {ours.device} vs {theirs.device}"
        if not torch.equal(ours.cpu(), theirs.cpu()):
            difference = (ours.cpu().long() - theirs.cpu().long()).nonzero()[:5].tolist()
            raise AssertionError(f"{path}: values differ, first at {difference}")
    elif isinstance(theirs, float):
        assert isinstance(ours, float) and (ours == theirs or (math.isnan(ours) and math.isnan(theirs))), \
            f"{path}: {ours!r} vs SGLang's {theirs!r}"
    else:
        assert type(ours) is type(theirs) and ours == theirs, f"{path}: {ours!r} vs SGLang's {theirs!r}"


def load_dumps(directory):
    """Every dump file in ``directory``, in the order written (names carry the time)."""
    files = sorted(directory.glob("expert_distribution_recorder_*.pt"),
                   key=lambda p: float(p.name.split("_")[3].removesuffix(".pt")))
    return [(path.name, torch.load(path, weights_only=False)) for path in files]


def first(iterable, default: Optional[object] = None):
    return next(iter(iterable), default)
