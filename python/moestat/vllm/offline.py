"""vLLM's load windows in moestat's files, and a placement planned offline served by vLLM.

vLLM 0.33.0 starts every deployment from one fixed map (``EplbState.add_model``: the experts in
order, then redundant slot ``i`` holding expert ``i % E``, on every MoE layer) and reads no
placement from a file or a flag. What it does take is the map its EPLB policy returns at a
rearrange. So, through moestat's policy (``eplb_policy.py``, installed by ``register()``):

- ``MOESTAT_VLLM_EPLB_LOAD_DIR=DIR``: at every rearrange the policy writes the load window it was
  handed (``[MoE layers, logical experts]``: summed over the window's steps and all-reduced over
  the EP ranks) as a moestat counts file in DIR, ``vllm-eplb-load-NNNNNN-LxE.json``
  (``MOESTAT_VLLM_EPLB_LOAD_FORMAT=pt`` or ``safetensors`` for those formats). NNNNNN counts up
  in this process from one past the highest number of six to nine digits in DIR when it first
  writes there, so names never grow with what else DIR holds. Only EP rank 0 writes. Windows
  without load (vLLM's profile run) are not written.
- ``MOESTAT_VLLM_EPLB_PLACEMENT=FILE``: a placement (``{"physical_to_logical_map": [L][P]}``,
  .json, .pt or .safetensors, as ``moestat plan`` writes it) that the policy returns instead of
  planning whenever its shape is vLLM's ``[L, P]`` and every expert has a replica; vLLM moves
  the weights to it at its first real rearrange and keeps it (later rearranges return it again
  and move nothing). Read once per process and model shape, refused at its first row that is
  not vLLM's shape; a file that cannot be used is a fault, and the policy plans as it would
  without it.

Neither ever stops vLLM: a failure is a fault, counted by kind in ``faults()``
(``load_window``: a window not written; ``placement``: the placement file not served), logged
once per kind and cause, and vLLM's rearrange goes on.

``load_window_counts`` reads vLLM's own tensors (``expert_load_window [W, L, P]`` and
``physical_to_logical_map [L, P]``, from an ``EplbState`` or saved with ``torch.save``) into
moestat counts ``[W, L, E]``; ``write_load_window`` writes them as a counts file.

Every file here has the MoE layers only, numbered as vLLM numbers them (row ``i`` is vLLM's
MoE layer ``i``, not decoder layer ``i``): that is the shape vLLM's map has, so a placement
planned on them fits vLLM as it is.
"""

import errno
import json
import logging
import os
import re
import threading
import time
import uuid

import numpy as np

from ..engines.faults import Faults

logger = logging.getLogger(__name__)

ENV_LOAD_DIR = "MOESTAT_VLLM_EPLB_LOAD_DIR"
ENV_LOAD_FORMAT = "MOESTAT_VLLM_EPLB_LOAD_FORMAT"
ENV_PLACEMENT = "MOESTAT_VLLM_EPLB_PLACEMENT"

LOAD_FILE_PREFIX = "vllm-eplb-load-"
_FORMATS = ("json", "pt", "safetensors")
# The names this module writes, whose numbers it continues: six digits, up to nine once a
# million windows are written. A longer number (a planted name) is not continued, so no name
# outgrows the file system's 255 bytes however DIR is filled.
_LOAD_FILE_PATTERN = re.compile(
    re.escape(LOAD_FILE_PREFIX) + r"(\d{6,9})-\d+x\d+\.(?:" + "|".join(_FORMATS) + r")\Z")

_lock = threading.Lock()
_logged = set()
_placements = {}  # (path, L, P, E) -> (map [L, P] int64 or None, why not)
_next_number = {}  # directory -> the number its next window takes
# The faults of this process's rearranges: vLLM calls its EPLB policy's class, so there is no
# instance to own them.
_faults = Faults(logger, "moestat.vllm.offline.faults()", logging.WARNING)


def _log_once(key, level, message, *args):
    with _lock:
        if key in _logged:
            return
        _logged.add(key)
    logger.log(level, message, *args)


def _fault(kind, cause, message, *args):
    """A failure inside vLLM's rearrange: counted by kind, logged once per kind and cause,
    never raised (vLLM must keep serving)."""
    _faults.add(kind, message % args if args else message, cause=cause)


def faults():
    """{kind: count} of the failures inside vLLM's rearranges in this process, each logged
    once per cause and never raised: ``load_window`` (a window that could not be written to
    $MOESTAT_VLLM_EPLB_LOAD_DIR) and ``placement`` (a rearrange at which
    $MOESTAT_VLLM_EPLB_PLACEMENT could not be read or did not fit the model)."""
    return dict(_faults)


def _cause(error):
    """What tells one kind of failure from another in the log: the exception's type and
    errno, not its message (which may name a new file every time)."""
    return type(error).__name__, getattr(error, "errno", None)


def _ep_rank():
    """This process's rank in vLLM's EP group, None outside vLLM's parallel state (a plain
    process: it writes). No communication: vLLM's group object knows it."""
    try:
        from vllm.distributed.parallel_state import get_ep_group

        return int(get_ep_group().rank_in_group)
    except Exception:  # noqa: BLE001 - no EP group here
        return None


def _pp_rank():
    try:
        from vllm.distributed.parallel_state import get_pp_group

        group = get_pp_group()
        return int(group.rank_in_group) if group.world_size > 1 else None
    except Exception:  # noqa: BLE001
        return None


def int64_array(array):
    """array (a numpy array, a torch tensor on any device, a nested list) as int64 numpy."""
    if hasattr(array, "detach"):  # a torch tensor, wherever it lives
        array = array.detach().cpu().numpy()
    return np.asarray(array).astype(np.int64, copy=False)


# --- the policy's hooks (never raise) ---------------------------------------------------------

def record_window(weight, num_replicas, num_groups, num_nodes, num_ranks):
    """Writes the window a rearrange handed the policy to $MOESTAT_VLLM_EPLB_LOAD_DIR (EP rank
    0 only; nothing without the variable or without load). Returns the path written, or None.
    Never raises: a failure is logged once per cause."""
    directory = os.environ.get(ENV_LOAD_DIR, "").strip()
    if not directory:
        return None
    try:
        rank = _ep_rank()
        if rank not in (None, 0):
            return None
        counts = int64_array(weight)
        if counts.ndim != 2:
            raise ValueError(f"expected the window as [layers, experts], got {counts.shape}")
        if not counts.any():
            return None  # vLLM's profile run (and any window without traffic)
        fmt = os.environ.get(ENV_LOAD_FORMAT, "json").strip().lower() or "json"
        if fmt not in _FORMATS:
            _log_once(("format", fmt), logging.WARNING,
                      "moestat: %s=%r is not one of %s; writing json", ENV_LOAD_FORMAT, fmt,
                      ", ".join(_FORMATS))
            fmt = "json"
        metadata = {
            "what": "the load window vLLM's EplbState handed its EPLB policy at a rearrange: "
                    "tokens routed to each logical expert, summed over the window's steps and "
                    "all-reduced over the EP ranks",
            "layers": "MoE layers only: row i is vLLM's MoE layer i, not decoder layer i",
            "num_replicas": int(num_replicas), "num_groups": int(num_groups),
            "num_nodes": int(num_nodes), "num_ranks": int(num_ranks),
            "unix_time": round(time.time(), 3),
        }
        pp_rank = _pp_rank()
        if pp_rank is not None:
            metadata["pp_rank"] = pp_rank
        return _publish(directory, counts, fmt, metadata)
    except Exception as error:  # noqa: BLE001 - vLLM must keep serving
        _fault("load_window", (directory, *_cause(error)),
               "cannot write vLLM's load window to %s (%s); vLLM goes on", directory,
               error)
        return None


def _publish(directory, counts, fmt, metadata):
    """Writes counts to a hidden temporary file in directory and links it to the next
    vllm-eplb-load-NNNNNN-LxE.<fmt>: a file appears whole, and none is ever overwritten."""
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(
        directory, f".{LOAD_FILE_PREFIX}{os.getpid()}-{uuid.uuid4().hex}.{fmt}")
    try:
        from .._core import write_logical_counts

        if fmt == "json":  # {"logical_count": [...], "vllm_eplb": {...}}
            write_logical_counts(temporary, counts, metadata=json.dumps({"vllm_eplb": metadata}))
        else:
            write_logical_counts(temporary, counts)
        layers, experts = counts.shape
        for _ in range(1000):  # a name another writer took meanwhile: the next number
            number = _take_number(directory)
            path = os.path.join(directory,
                                f"{LOAD_FILE_PREFIX}{number:06d}-{layers}x{experts}.{fmt}")
            if _link_new(temporary, path):
                return path
        raise OSError(f"no free file name in {directory}")
    finally:
        try:
            os.unlink(temporary)
        except OSError:
            pass


def _take_number(directory):
    """The number of directory's next window: counted by this process from one past the
    highest it finds there when it first writes (so a restart goes on after the last run)."""
    with _lock:
        number = _next_number.get(directory)
        if number is None:
            matches = map(_LOAD_FILE_PATTERN.match, os.listdir(directory))
            number = max((int(match.group(1)) for match in matches if match), default=0) + 1
        _next_number[directory] = number + 1
        return number


def _link_new(temporary, path):
    """Gives temporary's contents the name path unless path exists (False then)."""
    try:
        os.link(temporary, path)
        return True
    except FileExistsError:
        return False
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
    # no hard links here: reserve the name, then replace it whole
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    os.replace(temporary, path)
    return True


def static_placement(num_layers, num_replicas, num_experts):
    """The map of $MOESTAT_VLLM_EPLB_PLACEMENT ([L, P] int64) when it fits vLLM's [num_layers,
    num_replicas] map of num_experts experts with every expert replicated; None without the
    variable or when it does not fit (a ``placement`` fault). The file is read once per process
    and shape, and refused at its first row that breaks the shape (a file of another model's
    shape is not read through). Never raises."""
    path = os.environ.get(ENV_PLACEMENT, "").strip()
    if not path:
        return None
    try:
        phy2log, why_not = _read_placement_once(path, num_layers, num_replicas, num_experts)
        if phy2log is None:
            _fault("placement", (path, why_not),
                   "ignoring %s=%s for vLLM's [%d, %d] map of %d experts (%s); vLLM's EPLB "
                   "plans as usual", ENV_PLACEMENT, path, num_layers, num_replicas, num_experts,
                   why_not)
            return None
        _log_once(("placement-used", path, num_layers, num_replicas, num_experts), logging.INFO,
                  "moestat: vLLM's EPLB serves the placement %s ([%d, %d])", path, num_layers,
                  num_replicas)
        return phy2log.copy()
    except Exception as error:  # noqa: BLE001 - vLLM must keep serving
        _fault("placement", (path, *_cause(error)),
               "ignoring %s=%s (%s); vLLM's EPLB plans as usual", ENV_PLACEMENT, path,
               error)
        return None


def _read_placement_once(path, num_layers, num_replicas, num_experts):
    """(map, None) or (None, why not) for the placement at path read as vLLM's [num_layers,
    num_replicas] map of num_experts experts, each held at least once per layer (moestat's
    Placement checks it): read once per process and shape."""
    key = (path, int(num_layers), int(num_replicas), int(num_experts))
    with _lock:
        if key in _placements:
            return _placements[key]
    try:
        from .._core import read_placement

        placement = read_placement(path, num_logical_experts=key[3], num_layers=key[1],
                                   num_physical_experts=key[2])
        result = (np.ascontiguousarray(placement.physical_to_logical, dtype=np.int64), None)
    except Exception as error:  # noqa: BLE001 - moestat.Error, OSError, ...
        result = (None, str(error))
    with _lock:
        return _placements.setdefault(key, result)


# --- vLLM's load window tensors ---------------------------------------------------------------

def eplb_model_state(state, model):
    """The EplbState's state of model (its key or model_name; None: its only model); raises
    ValueError naming the models it has."""
    states = state.model_states
    if model is None:
        if len(states) != 1:
            names = [getattr(s, "model_name", key) for key, s in states.items()]
            raise ValueError(f"the EplbState has {len(states)} models {names}: name one (model=)")
        return next(iter(states.values()))
    for key, candidate in states.items():
        if model in (key, getattr(candidate, "model_name", None)):
            return candidate
    names = [getattr(s, "model_name", key) for key, s in states.items()]
    raise ValueError(f"no model {model!r} in the EplbState (models: {names})")


def load_window_tensors(eplb_state, model=None):
    """vLLM's load window of one model of an EplbState, as CPU tensors in a dict to save with
    ``torch.save`` and read back with ``load_window_counts``: ``expert_load_window`` [W, L, P]
    int32, ``physical_to_logical_map`` [L, P] int64, ``expert_load_window_step`` (the row vLLM
    writes next: the oldest) and ``num_logical_experts``. model: the model's name or key when
    the state has several (a drafter)."""
    model_state = eplb_model_state(eplb_state, model)
    return {
        "expert_load_window": model_state.expert_load_window.detach().cpu().clone(),
        "physical_to_logical_map": model_state.physical_to_logical_map.detach().cpu().clone(),
        "expert_load_window_step": int(eplb_state.expert_load_window_step),
        "num_logical_experts": int(model_state.model.num_logical_experts),
    }


def window_source(source, model):
    """(window [W, L, P], map [L, P], oldest row or None, experts or None) from what
    load_window_counts takes."""
    if isinstance(source, (str, os.PathLike)):
        import torch

        source = torch.load(os.fspath(source), map_location="cpu", weights_only=True)
    if hasattr(source, "model_states"):  # an EplbState
        source = load_window_tensors(source, model)
    if hasattr(source, "expert_load_window"):  # one EplbModelState
        experts = getattr(getattr(source, "model", None), "num_logical_experts", None)
        return source.expert_load_window, source.physical_to_logical_map, None, experts
    if isinstance(source, dict):
        missing = {"expert_load_window", "physical_to_logical_map"} - set(source)
        if missing:
            raise ValueError(f"expected the keys expert_load_window and physical_to_logical_map; "
                             f"missing {sorted(missing)}")
        return (source["expert_load_window"], source["physical_to_logical_map"],
                source.get("expert_load_window_step"), source.get("num_logical_experts"))
    if isinstance(source, (tuple, list)) and len(source) == 2:
        return source[0], source[1], None, None
    raise TypeError("expected an EplbState, an EplbModelState, a dict or a file of "
                    "load_window_tensors, or (expert_load_window, physical_to_logical_map); "
                    f"got {type(source).__name__}")


def load_window_counts(source, model=None, num_logical_experts=None):
    """vLLM's load window as moestat counts: int64 [W, L, E], the tokens of each window step,
    MoE layer and logical expert, each physical slot's load added to the logical expert the
    map puts there (as ``EplbState.rearrange`` does; slots mapped to -1 are left out).

    source: an ``EplbState`` (model: which model when it has several), one of its
    ``EplbModelState``, the dict ``load_window_tensors`` returns (or a file it was saved to with
    ``torch.save``), or a pair (``expert_load_window`` [W, L, P], ``physical_to_logical_map``
    [L, P]). With the window's write position (an EplbState or load_window_tensors) the steps
    come oldest first; otherwise in vLLM's ring order. E is num_logical_experts, else the
    state's, else the largest id in the map + 1.

    One rank's window counts the tokens that rank routed; sum the ranks' (``moestat merge``)
    for the deployment's load, which is what vLLM's rearrange plans on."""
    window, phy2log, oldest, experts = window_source(source, model)
    window = int64_array(window)
    phy2log = int64_array(phy2log)
    if window.ndim != 3 or phy2log.ndim != 2 or window.shape[1:] != phy2log.shape:
        raise ValueError(f"expected expert_load_window [W, L, P] and physical_to_logical_map "
                         f"[L, P]; got {list(window.shape)} and {list(phy2log.shape)}")
    if num_logical_experts is None:
        num_logical_experts = experts
    if num_logical_experts is None:
        num_logical_experts = int(phy2log.max()) + 1 if phy2log.size else 0
    num_logical_experts = int(num_logical_experts)
    if phy2log.size and phy2log.max() >= num_logical_experts:
        raise ValueError(f"the map holds expert {int(phy2log.max())}, beyond "
                         f"{num_logical_experts} logical experts")
    steps, layers, slots = window.shape
    column = np.where(phy2log < 0, num_logical_experts, phy2log)  # -1: a slot with no expert
    flat = (np.arange(layers)[:, None] * (num_logical_experts + 1) + column).ravel()
    counts = np.zeros((steps, layers * (num_logical_experts + 1)), dtype=np.int64)
    np.add.at(counts, (slice(None), flat), window.reshape(steps, layers * slots))
    counts = counts.reshape(steps, layers, num_logical_experts + 1)[..., :num_logical_experts]
    if oldest is not None and steps:
        counts = np.roll(counts, -int(oldest) % steps, axis=0)
    return np.ascontiguousarray(counts)


def write_load_window(path, source, model=None, num_logical_experts=None):
    """Writes ``load_window_counts(source, ...)`` [W, L, E] as a moestat counts file (by
    extension: .json, .pt or .safetensors; ``moestat plan --stats`` and ``moestat inspect`` read
    it, ``moestat plan`` groups its steps into scenarios). Returns the counts."""
    from .._core import write_logical_counts

    counts = load_window_counts(source, model, num_logical_experts)
    write_logical_counts(path, counts)
    return counts


__all__ = ["ENV_LOAD_DIR", "ENV_LOAD_FORMAT", "ENV_PLACEMENT", "faults", "load_window_counts",
           "load_window_tensors", "write_load_window", "record_window", "static_placement"]
