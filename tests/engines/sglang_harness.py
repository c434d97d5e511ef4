"""SGLang's own expert-distribution recorder, run without SGLang's server.

The engine tests compare moestat with the recorder SGLang really ships:
`sglang/srt/eplb/expert_distribution.py` of the pinned sglang release
(`tests/engines/requirements-no-deps.txt`). Importing it the ordinary way runs
`sglang/__init__.py`, which imports the whole server (FlashInfer, the HTTP
front end, hundreds of packages that `.venv-engines` deliberately leaves out:
sglang is installed there with `--no-deps`). This module loads the real file
all the same:

- The directory of the installed sglang package is found with
  `importlib.util.find_spec("sglang")` (for a top-level name this only looks
  the package up; it runs nothing), or, where the environment variable
  `MOESTAT_SGLANG_WHEEL` names a downloaded sglang wheel, the few files needed
  are extracted from that wheel into a temporary directory (for machines whose
  Python cannot install the wheel, e.g. a cp311 wheel under Python 3.12; the
  modules used are pure Python).
- `sglang`, `sglang.srt` and `sglang.srt.eplb` are put into `sys.modules` as
  bare package modules whose `__path__` is the real directory, so their
  `__init__.py` files do not run while `sglang.srt.environ` (the environment
  variable registry, free of dependencies) and
  `sglang.srt.eplb.expert_distribution` load from the real files.

Everything the recorder's imports need apart from that is replaced by a small
stand-in, none of it part of recording:

- `sglang.srt.runtime_context`: SGLang's published server configuration.
  Here `get_exec()`, `get_schedule()`, `get_platform()`, `get_device()`,
  `get_parallel()` and `get_resources()` answer from one mutable
  `EngineConfig` (see `load_sglang_expert_distribution`); the predicates
  `reports_expert_balancedness`, `logs_expert_balancedness_to_server_log` and
  `exports_expert_balancedness_to_prometheus` are SGLang's own, taken from the
  real file's source.
- `sglang.srt.model_executor.forward_batch_info`: `ForwardMode` is SGLang's
  own enum taken from the real file's source (same members and values);
  `ForwardBatch` is a dataclass with only the fields the recorder reads
  (`forward_mode`, `input_ids`, `positions`, `extend_seq_lens_cpu`,
  `extend_num_tokens`, `is_extend_in_batch`). The real module needs Triton
  kernels, the attention backends and the scheduler.
- `sglang.srt.model_executor.runner_utils.capture_mode`: `is_capture_mode`
  from `config.capture.is_capture_mode` (read only on the ROCm MegaMoE path).
- `sglang.srt.observability.metrics_collector`: the Prometheus metrics.
  `STAT_LOGGER_ROLE_EXPERT_DISPATCH` is the real constant (from the source);
  `resolve_collector_class` returns its default, as the real one does while
  no observability configuration is published; `ExpertDispatchCollector` is
  inert (it registers no histogram, so SGLANG_EPLB_HEATMAP_COLLECTION_INTERVAL
  must stay unset).
- `sglang.srt.layers.moe`: `get_moe_a2a_backend()` (imported by the recorder
  on every pass) returns SGLang's own `MoeA2ABackend` enum (from the real
  source) for `config.exec.moe.moe_a2a_backend`. The real package imports
  every MoE kernel.
- `sglang.srt.utils`: `Withable` and `get_int_env_var` are SGLang's own,
  taken from the real `sglang/srt/utils/common.py` with `ast` and executed
  (that module imports most of the server); `get_device()` returns the
  configured device string instead of probing the machine.

Definitions "taken from the source" are compiled from the real file under its
real name, so tracebacks point into SGLang's code.

Usage:

    ed, config = load_sglang_expert_distribution()
    config.exec.moe.expert_distribution_recorder_mode = "stat"
    recorder = ed.ExpertDistributionRecorder.init_new(make_metadata(...), rank=0)

`reset_config()` puts every setting back to its default (the same object is
kept, so references to it stay valid).
"""
from __future__ import annotations

import __future__
import ast
import atexit
import contextlib
import dataclasses
import enum
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import pathlib
import shutil
import sys
import tempfile
import types
import typing
import zipfile
from dataclasses import dataclass, field
from typing import Any, Optional

# ---------------------------------------------------------------------------------------------
# The configuration the stand-ins answer from
# ---------------------------------------------------------------------------------------------


@dataclass
class MoeConfig:
    """`get_exec().moe`: the server arguments the recorder reads."""

    # None (recording off), "stat", "stat_approx", "per_pass" or "per_token".
    expert_distribution_recorder_mode: Optional[str] = None
    # Passes kept by the "stat" window; -1 keeps every pass. (SGLang resolves its None default
    # to eplb_rebalance_num_iterations, 1000.)
    expert_distribution_recorder_buffer_size: int = 1000
    # "none", "deepep", "mori", "mooncake", "nixl", "flashinfer", "megamoe", ...
    moe_a2a_backend: str = "none"
    # "normal", "low_latency" or "auto".
    deepep_mode: str = "auto"
    # None, "mooncake" or "nixl".
    elastic_ep_backend: Optional[str] = None
    # "off", "server_log", "prometheus" or "both".
    expert_balancedness_report_mode: str = "off"
    eplb_min_rebalancing_utilization_threshold: float = 1.0


@dataclass
class OverlapConfig:
    """`get_exec().overlap`."""

    enable_two_batch_overlap: bool = False


@dataclass
class ExecConfig:
    """`get_exec()`."""

    moe: MoeConfig = field(default_factory=MoeConfig)
    overlap: OverlapConfig = field(default_factory=OverlapConfig)


@dataclass
class ScheduleConfig:
    """`get_schedule()`. The per-token gatherer allocates chunked_prefill_size * 8 rows."""

    chunked_prefill_size: int = 8192


@dataclass
class PlatformConfig:
    """`get_platform()`. True selects the ROCm-only MegaMoE prefill path."""

    is_hip: bool = False


@dataclass
class DeviceConfig:
    """`runtime_context.get_device()`; `.device` is also what `utils.get_device()` returns."""

    device: str = "cpu"


@dataclass
class ParallelConfig:
    """`get_parallel()`."""

    attn_tp_rank: int = 0
    attn_tp_size: int = 1


@dataclass
class ResourcesConfig:
    """`get_resources()`: where `set_global_expert_distribution_recorder` keeps the recorder."""

    expert_distribution_recorder: Any = None


@dataclass
class CaptureConfig:
    """`model_executor.runner_utils.capture_mode.is_capture_mode`."""

    is_capture_mode: bool = False


@dataclass
class EngineConfig:
    """Everything the stand-ins of SGLang's server modules answer with; change it freely."""

    exec: ExecConfig = field(default_factory=ExecConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    platform: PlatformConfig = field(default_factory=PlatformConfig)
    device: DeviceConfig = field(default_factory=DeviceConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    capture: CaptureConfig = field(default_factory=CaptureConfig)

    def reset(self) -> "EngineConfig":
        """Every setting back to its default, in place."""
        fresh = EngineConfig()
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(fresh, f.name))
        return self


config = EngineConfig()


def reset_config() -> EngineConfig:
    """Puts every setting of `config` back to its default and returns it."""
    return config.reset()


# ---------------------------------------------------------------------------------------------
# Finding SGLang's files
# ---------------------------------------------------------------------------------------------

# What is read from SGLang's package (relative to the directory that holds `sglang/`); the
# whole of eplb/ comes along so that the recorder's neighbours can be loaded by later tests.
_NEEDED_FILES = (
    "sglang/srt/environ.py",
    "sglang/srt/runtime_context.py",
    "sglang/srt/utils/common.py",
    "sglang/srt/model_executor/forward_batch_info.py",
    "sglang/srt/layers/moe/utils.py",
    "sglang/srt/observability/metrics_collector.py",
)
_NEEDED_DIRS = ("sglang/srt/eplb/",)


@dataclass(frozen=True)
class SglangSource:
    """Where SGLang's files were found."""

    package_dir: pathlib.Path  # the `sglang` directory
    version: str
    origin: str  # "installed" or the wheel's path


_source: Optional[SglangSource] = None
_loaded: Optional[types.ModuleType] = None


def _wheel_version(wheel: zipfile.ZipFile) -> str:
    for name in wheel.namelist():
        if name.startswith("sglang-") and name.endswith(".dist-info/METADATA"):
            for line in wheel.read(name).decode("utf-8").splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    return "unknown"


def _extract_wheel(path: pathlib.Path) -> SglangSource:
    if not path.is_file():
        raise FileNotFoundError(f"MOESTAT_SGLANG_WHEEL={path}: no such file")
    target = pathlib.Path(tempfile.mkdtemp(prefix="moestat-sglang-"))
    atexit.register(shutil.rmtree, target, ignore_errors=True)
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        wanted = [
            n
            for n in names
            if n in _NEEDED_FILES or (n.startswith(_NEEDED_DIRS) and n.endswith(".py"))
        ]
        missing = [n for n in _NEEDED_FILES if n not in wanted]
        if missing:
            raise RuntimeError(f"{path} is not an sglang wheel with {', '.join(missing)}")
        for name in wanted:
            wheel.extract(name, target)
        version = _wheel_version(wheel)
    return SglangSource(target / "sglang", version, str(path))


def sglang_source() -> SglangSource:
    """Finds SGLang's package: MOESTAT_SGLANG_WHEEL if set, else the installed package."""
    global _source
    if _source is not None:
        return _source
    wheel = os.environ.get("MOESTAT_SGLANG_WHEEL")
    if wheel:
        _source = _extract_wheel(pathlib.Path(wheel))
        return _source
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "sglang is not installed: run scripts/setup_engine_venv.sh and use "
            ".venv-engines/bin/python, or set MOESTAT_SGLANG_WHEEL to an sglang wheel"
        )
    package_dir = pathlib.Path(list(spec.submodule_search_locations)[0])
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    _source = SglangSource(package_dir, version, "installed")
    return _source


# ---------------------------------------------------------------------------------------------
# Building the modules
# ---------------------------------------------------------------------------------------------


def _package(name: str, path: Optional[pathlib.Path]) -> types.ModuleType:
    """A package module that runs no __init__.py; submodules load from `path` (none: no real
    submodule can load, so an import the harness does not provide fails by name)."""
    locations = [str(path)] if path is not None else []
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = locations
    module = importlib.util.module_from_spec(spec)
    module.__path__ = locations
    return module


def _module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    return module


def _exec_definitions(path: pathlib.Path, names: tuple[str, ...], module: types.ModuleType) -> None:
    """Executes the top-level definitions `names` (classes, functions, assignments) of the
    real source file `path` inside `module`, whose namespace must already hold what they use.
    Compiled under the file's own name and line numbers."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    flags = 0
    found: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            if any(alias.name == "annotations" for alias in node.names):
                flags |= __future__.annotations.compiler_flag
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in names:
            found[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in names:
                    found[target.id] = node
    missing = [n for n in names if n not in found]
    if missing:
        raise RuntimeError(f"{path} no longer defines {', '.join(missing)} at top level")
    body = sorted(set(found.values()), key=lambda node: node.lineno)
    code = compile(ast.Module(body=body, type_ignores=[]), str(path), "exec", flags=flags,
                   dont_inherit=True)
    exec(code, module.__dict__)  # noqa: S102 - SGLang's own definitions, see the docstring


@dataclass
class ForwardBatch:
    """The fields of SGLang's ForwardBatch that the recorder reads."""

    forward_mode: Any  # a ForwardMode
    input_ids: Any = None  # torch.Tensor [num_tokens]
    positions: Any = None  # torch.Tensor [num_tokens]
    extend_seq_lens_cpu: Optional[list] = None
    extend_num_tokens: Optional[int] = None
    is_extend_in_batch: bool = False


class ExpertDispatchCollector:
    """Inert stand-in of SGLang's Prometheus collector of per-GPU dispatch counts."""

    def __init__(self, ep_size: int) -> None:
        self.ep_size = ep_size
        self.eplb_gpu_physical_count = None


def _build_modules(source: SglangSource) -> dict[str, types.ModuleType]:
    srt = source.package_dir / "srt"
    modules: dict[str, types.ModuleType] = {
        "sglang": _package("sglang", source.package_dir),
        "sglang.srt": _package("sglang.srt", srt),
        "sglang.srt.eplb": _package("sglang.srt.eplb", srt / "eplb"),
        "sglang.srt.model_executor": _package("sglang.srt.model_executor", None),
        "sglang.srt.model_executor.runner_utils": _package(
            "sglang.srt.model_executor.runner_utils", None),
        "sglang.srt.observability": _package("sglang.srt.observability", None),
        "sglang.srt.layers": _package("sglang.srt.layers", None),
    }

    # sglang.srt.runtime_context
    rc = _module("sglang.srt.runtime_context")
    rc.get_exec = lambda: config.exec
    rc.get_schedule = lambda: config.schedule
    rc.get_platform = lambda: config.platform
    rc.get_device = lambda: config.device
    rc.get_parallel = lambda: config.parallel
    rc.get_resources = lambda: config.resources
    _exec_definitions(srt / "runtime_context.py",
                      ("reports_expert_balancedness", "logs_expert_balancedness_to_server_log",
                       "exports_expert_balancedness_to_prometheus"), rc)
    modules[rc.__name__] = rc

    # sglang.srt.model_executor.forward_batch_info
    fbi = _module("sglang.srt.model_executor.forward_batch_info")
    fbi.IntEnum, fbi.auto = enum.IntEnum, enum.auto
    _exec_definitions(srt / "model_executor" / "forward_batch_info.py", ("ForwardMode",), fbi)
    fbi.ForwardBatch = ForwardBatch
    modules[fbi.__name__] = fbi

    # sglang.srt.model_executor.runner_utils.capture_mode
    capture = _module("sglang.srt.model_executor.runner_utils.capture_mode")

    def capture_getattr(name: str) -> Any:
        if name == "is_capture_mode":
            return config.capture.is_capture_mode
        raise AttributeError(f"the harness's capture_mode has no {name!r}")

    capture.__getattr__ = capture_getattr
    modules[capture.__name__] = capture

    # sglang.srt.observability.metrics_collector
    metrics = _module("sglang.srt.observability.metrics_collector")
    _exec_definitions(srt / "observability" / "metrics_collector.py",
                      ("STAT_LOGGER_ROLE_EXPERT_DISPATCH",), metrics)
    metrics.ExpertDispatchCollector = ExpertDispatchCollector
    metrics.resolve_collector_class = lambda role, default_cls: default_cls
    modules[metrics.__name__] = metrics

    # sglang.srt.utils
    utils = _module("sglang.srt.utils")
    utils.__dict__.update(os=os, contextmanager=contextlib.contextmanager, Generic=typing.Generic,
                          Optional=typing.Optional, TypeVar=typing.TypeVar)
    _exec_definitions(srt / "utils" / "common.py", ("T", "Withable", "get_int_env_var"), utils)

    def get_device(device_id: Optional[int] = None) -> str:
        device = config.device.device
        return device if device_id is None or device == "cpu" else f"{device}:{device_id}"

    utils.get_device = get_device
    modules[utils.__name__] = utils
    return modules


def _install() -> types.ModuleType:
    present = sys.modules.get("sglang")
    if present is not None and not getattr(present, "__moestat_harness__", False):
        raise RuntimeError("the real sglang package is already imported in this process; the "
                           "harness needs to provide sglang's modules itself")
    source = sglang_source()
    modules = _build_modules(source)
    modules["sglang"].__moestat_harness__ = True
    sys.modules.update(modules)

    # SGLang's environment registry, then the stand-in of sglang.srt.layers.moe, which needs
    # the registry for MoeA2ABackend.
    envs = importlib.import_module("sglang.srt.environ").envs
    moe = _package("sglang.srt.layers.moe", None)
    moe.Enum, moe.envs = enum.Enum, envs
    _exec_definitions(source.package_dir / "srt" / "layers" / "moe" / "utils.py",
                      ("MoeA2ABackend",), moe)
    moe.get_moe_a2a_backend = lambda: moe.MoeA2ABackend(config.exec.moe.moe_a2a_backend)
    sys.modules[moe.__name__] = moe

    return importlib.import_module("sglang.srt.eplb.expert_distribution")


def load_sglang_expert_distribution() -> tuple[types.ModuleType, EngineConfig]:
    """SGLang's real `sglang.srt.eplb.expert_distribution` module (loaded once per process)
    and the configuration its stand-ins answer from."""
    global _loaded
    if _loaded is None:
        _loaded = _install()
    return _loaded, config


# ---------------------------------------------------------------------------------------------
# Inputs for the recorder
# ---------------------------------------------------------------------------------------------


@dataclass
class ExpertLocationMetadata:
    """What the recorder reads of SGLang's ExpertLocationMetadata."""

    num_layers: int
    num_physical_experts: int
    num_local_physical_experts: int
    num_logical_experts: int
    ep_size: int
    physical_to_logical_map: Any  # torch.Tensor [num_layers, num_physical_experts] int64


def make_metadata(num_layers: int, num_logical: int, num_physical: int, ep_size: int,
                  device: str = "cpu", physical_to_logical_map: Any = None) -> ExpertLocationMetadata:
    """Expert placement of `num_physical` slots over `ep_size` ranks. Without a map, slot p
    holds logical expert p % num_logical (SGLang's trivial placement plus replicas)."""
    import torch

    if num_physical % ep_size:
        raise ValueError(f"{num_physical} physical experts do not divide over {ep_size} ranks")
    if physical_to_logical_map is None:
        row = torch.arange(num_physical, dtype=torch.int64) % num_logical
        physical_to_logical_map = row.repeat(num_layers, 1)
    phy2log = torch.as_tensor(physical_to_logical_map, dtype=torch.int64).to(device)
    if tuple(phy2log.shape) != (num_layers, num_physical):
        raise ValueError(f"physical_to_logical_map has shape {tuple(phy2log.shape)}, "
                         f"expected ({num_layers}, {num_physical})")
    return ExpertLocationMetadata(num_layers, num_physical, num_physical // ep_size, num_logical,
                                  ep_size, phy2log)


def make_forward_batch(num_tokens: int, forward_mode: str = "decode", device: str = "cpu",
                       extend_seq_lens: Optional[list] = None) -> ForwardBatch:
    """A ForwardBatch of `num_tokens` tokens; forward_mode names a ForwardMode member."""
    import torch

    module, _ = load_sglang_expert_distribution()
    mode = module.ForwardMode[forward_mode.upper()]
    extend = mode.is_extend()
    if extend and extend_seq_lens is None:
        extend_seq_lens = [num_tokens]
    return ForwardBatch(
        forward_mode=mode,
        input_ids=torch.zeros(num_tokens, dtype=torch.int64, device=device),
        positions=torch.arange(num_tokens, dtype=torch.int64, device=device),
        extend_seq_lens_cpu=extend_seq_lens if extend else None,
        extend_num_tokens=num_tokens if extend else None,
        is_extend_in_batch=extend,
    )


def write_files_zip(path: str) -> None:
    """Writes what MOESTAT_SGLANG_WHEEL reads (the files this module loads, those the
    routed-experts tests load through sglang_state_capturer, and sglang's METADATA) from the
    installed sglang into a zip at path: for a machine that cannot install sglang
    (tests/device_prepare.sh)."""
    import sglang_state_capturer  # noqa: PLC0415 (it imports this module)

    source = sglang_source()
    root = source.package_dir.parent
    metadata = importlib.metadata.distribution("sglang")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in _NEEDED_FILES + sglang_state_capturer.LOADED_FILES:
            archive.write(root / name, name)
        for directory in _NEEDED_DIRS:
            for file in sorted((root / directory).rglob("*.py")):
                archive.write(file, file.relative_to(root).as_posix())
        archive.writestr(f"sglang-{source.version}.dist-info/METADATA",
                         metadata.read_text("METADATA"))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=write_files_zip.__doc__)
    parser.add_argument("--zip", required=True, help="the zip file to write")
    write_files_zip(parser.parse_args().zip)
