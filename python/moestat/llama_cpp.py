"""moestat.llama_cpp: record expert routing inside llama.cpp from Python (llama-cpp-python).

llama-cpp-python's low-level API exposes llama.cpp's eval callback
(``llama_context_params.cb_eval``). ``LlamaCppRecorder`` installs a ctypes callback there that
reads each MoE layer's selected experts, llama.cpp's ``ffn_moe_topk-<layer>`` tensors, and
feeds any moestat recorder with the layer of the tensor's name, as the C++ component
``moestat::llama_cpp::LlamaRecorder`` does (docs/llama-cpp.md):

    import llama_cpp, moestat
    from moestat.llama_cpp import LlamaCppRecorder, model_topology

    model = llama_cpp.llama_model_load_from_file(b"model.gguf",
                                                 llama_cpp.llama_model_default_params())
    recorder = moestat.CpuRecorder(model_topology(model), mode="stat", window_size=-1)
    llama_recorder = LlamaCppRecorder(recorder)
    params = llama_cpp.llama_context_default_params()
    llama_recorder.attach(params)          # keeps a cb_eval already set there, called first
    ctx = llama_cpp.llama_init_from_model(model, params)
    # ... the program's warm-up decode, if it makes one ...
    recorder.start()
    llama_recorder.start()
    llama_cpp.llama_decode(ctx, batch)
    llama_recorder.end_pass()              # after each llama_decode; raises an error the
                                           # callback met
    counts = recorder.snapshot().logical_counts

``python -m moestat.llama_cpp MODEL.gguf --prompts FILE --out DIR`` runs a model over a file of
prompts and writes what ``moestat llama-record`` writes (``record_prompts``).

What it costs: llama.cpp calls the callback for every graph node (about 50 per layer), here a
Python function (a few microseconds each: the name of the node is compared while recording,
nothing is read while not), and synchronises after each node the callback asks for, one per
MoE layer per micro-batch. docs/BENCHMARKS.md has the numbers; the C++ component costs less.

llama-cpp-python's high-level ``Llama`` class makes its context inside its constructor and
takes no eval callback: record through the low-level API, as above.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import time
import weakref

import numpy as np

import moestat

__all__ = ["LlamaCppRecorder", "model_topology", "pass_counts", "record_prompts",
           "write_snapshot_json"]

# NOTE: exactly this prefix and a layer number: deepseek2's `ffn_moe_group_topk-<il>` (group
# ids) and ggml's `ffn_moe_topk-<il> (view)` names are other tensors.
_TOPK_PREFIX = b"ffn_moe_topk-"
_GGML_TYPE_I32 = 26
_GGML_MAX_DIMS = 4
_GGML_MAX_NAME = 64


class _GgmlTensor(ctypes.Structure):
    """The leading fields of ggml.h's `struct ggml_tensor` (ggml 0.x, as llama.cpp b6xxx-b8xxx
    and llama-cpp-python 0.3.36 lay it out); checked against libggml's own accessors on the
    first node the callback sees (`_check_layout`)."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * _GGML_MAX_DIMS),
        ("nb", ctypes.c_size_t * _GGML_MAX_DIMS),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * _GGML_MAX_NAME),
    ]


_NAME_OFFSET = _GgmlTensor.name.offset
# The name's first 13 bytes read as two little-endian words, compared before any string is made:
# the callback asks about every node of the graph, ~60 per layer, and this is its cost.
_U64_AT = ctypes.c_uint64.from_address
_PREFIX_WORD = int.from_bytes(_TOPK_PREFIX[:8], "little")  # "ffn_moe_"
_PREFIX_TAIL = int.from_bytes(_TOPK_PREFIX[8:], "little")  # "topk-"
_PREFIX_TAIL_MASK = (1 << (8 * (len(_TOPK_PREFIX) - 8))) - 1

# Addresses of the callbacks of every LlamaCppRecorder alive: parameters that already hold
# one are refused (reused parameters would feed both recorders).
_callback_addresses: "weakref.WeakValueDictionary[int, LlamaCppRecorder]" = (
    weakref.WeakValueDictionary())


def _loaded_library(stem: str) -> str | None:
    """The path of a shared library this process has loaded whose file name starts with
    `stem` (Linux: /proc/self/maps), or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if os.path.basename(path).startswith(stem) and ".so" in path:
                    return path
    except OSError:
        return None
    return None


class _Ggml:
    """The few ggml functions the callback calls (libggml-base, which libllama loaded)."""

    def __init__(self, path: str):
        library = ctypes.CDLL(path)
        self.get_name = library.ggml_get_name
        self.get_name.argtypes = [ctypes.c_void_p]
        self.get_name.restype = ctypes.c_char_p
        self.nbytes = library.ggml_nbytes
        self.nbytes.argtypes = [ctypes.c_void_p]
        self.nbytes.restype = ctypes.c_size_t
        self.buffer_is_host = library.ggml_backend_buffer_is_host
        self.buffer_is_host.argtypes = [ctypes.c_void_p]
        self.buffer_is_host.restype = ctypes.c_bool
        self.tensor_get = library.ggml_backend_tensor_get
        self.tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                    ctypes.c_size_t]
        self.tensor_get.restype = None


def _topk_layer(name: bytes) -> int:
    """The layer of a `ffn_moe_topk-<layer>` name, or -1 for any other name."""
    if not name.startswith(_TOPK_PREFIX):
        return -1
    digits = name[len(_TOPK_PREFIX):]
    return int(digits) if digits.isdigit() else -1


class LlamaCppRecorder:
    """Feeds a moestat Recorder from llama.cpp's eval callback, through llama-cpp-python.

    While recording, the callback asks llama.cpp for exactly the ``ffn_moe_topk-<layer>``
    nodes (I32 ``[n_expert_used, n_tokens]`` views, rows ``nb[1]`` bytes apart) and hands each
    to ``Recorder.record_topk`` with the layer of its name: counts in every mode, per-token
    traces in ``per_token``. While not recording it asks for none.

    Passes: one per llama.cpp micro-batch (ubatch). A pass opens at the micro-batch's first MoE
    layer and closes when a layer at or below the last one arrives, or at ``end_pass()``, which
    the program calls once ``llama_decode`` returns.

    Warm-up: llama.cpp's warm-up decode routes like any other and cannot be told apart by its
    tensors; nothing is recorded until ``start()``, which the program calls once its warm-up is
    over (llama-cpp-python's ``Llama`` makes none; llama.cpp's ``common`` programs do).

    Rows: llama.cpp's last layer routes only the tokens that request output
    (``batch.logits``). Counts record what was routed; per-token traces need every token in
    every layer, so in ``per_token`` mode a layer with fewer rows than the pass's first is an
    error (request output for every token, as ``record_prompts`` does).

    Errors cannot cross llama.cpp's C interface: the callback drops the pass, returns False
    (which stops that graph split; llama.cpp 0.3.36 still reports success, so that decode's
    outputs are not to be used), records nothing more, and ``check()`` (also called by
    ``end_pass`` and ``stop``) raises the error.

    Backends: ids in host memory (CPU) are read in place; ids in device memory (CUDA) are
    copied to the host with ``ggml_backend_tensor_get`` first.

    The object must outlive the context (llama.cpp keeps the callback's address). One per
    context, driven by the thread that decodes.
    """

    def __init__(self, recorder: moestat.Recorder, *, ggml_library: str | os.PathLike | None = None):
        """recorder: any moestat Recorder with the model's topology (``model_topology``).
        ggml_library: libggml-base's path; by default the one this process has loaded (with
        libllama, found through /proc/self/maps when ``attach`` is called)."""
        self._recorder = recorder
        # Per-token traces need every row of a pass in every layer.
        self._per_token = recorder.snapshot().mode == "per_token"
        self._ggml_library = None if ggml_library is None else os.fspath(ggml_library)
        self._ggml: _Ggml | None = None
        self._callback = None
        self._previous = None
        self._previous_keepalive = None
        self._previous_user_data = None
        self._previous_wants = False
        self._wanted_layer = -1
        self._recording = False
        self._pass_open = False
        self._last_layer = -1
        self._pass_tokens = 0
        self._num_passes = 0
        self._layout_checked = False
        self._error: BaseException | None = None

    # -- control ----------------------------------------------------------------------------

    def attach(self, params) -> None:
        """Points ``params.cb_eval`` at this recorder's callback (params: a
        ``llama_cpp.llama_context_params``). A callback already set there keeps being called
        first, for every node, with its own user data: the nodes it asks for are asked for,
        and its answer for them (False stops the graph) is kept. Once per recorder;
        moestat.Error if ``params`` already hold a LlamaCppRecorder's callback."""
        if self._callback is not None:
            raise moestat.Error("LlamaCppRecorder.attach: already attached to a context's parameters")
        fields = dict(getattr(type(params), "_fields_", []))
        if "cb_eval" not in fields or "cb_eval_user_data" not in fields:
            raise moestat.Error("LlamaCppRecorder.attach: expected llama_cpp.llama_context_params "
                                f"(with cb_eval and cb_eval_user_data), got {type(params).__name__}")
        previous = params.cb_eval
        previous_address = ctypes.cast(previous, ctypes.c_void_p).value if previous else None
        if previous_address is not None and previous_address in _callback_addresses:
            raise moestat.Error("LlamaCppRecorder.attach: the parameters already hold a "
                                "LlamaCppRecorder's callback")
        path = self._ggml_library or _loaded_library("libggml-base")
        if path is None:
            raise moestat.Error("LlamaCppRecorder.attach: libggml-base is not loaded (import "
                                "llama_cpp first, or pass ggml_library=)")
        self._ggml = _Ggml(path)
        # NOTE: a field read from a ctypes structure shares its memory: the previous callback
        # is called through a pointer of its own, and the thunk the structure keeps for it
        # (ctypes' _objects, by field index) is kept alive here once the field is overwritten.
        if previous_address is not None:
            self._previous = fields["cb_eval"](previous_address)
            index = [name for name, _ in type(params)._fields_].index("cb_eval")
            self._previous_keepalive = (getattr(params, "_objects", None) or {}).get(str(index))
        self._previous_user_data = params.cb_eval_user_data
        self._callback = fields["cb_eval"](self._on_eval)
        params.cb_eval = self._callback
        params.cb_eval_user_data = None
        _callback_addresses[ctypes.cast(self._callback, ctypes.c_void_p).value] = self

    def start(self) -> None:
        """Records the micro-batches computed from now on (the warm-up must be over)."""
        self._recording = True

    def stop(self) -> None:
        """Ends the open pass and records nothing more until start(); then check()."""
        self._close_pass()
        self._recording = False
        self.check()

    @property
    def is_recording(self) -> bool:
        return self._recording

    def end_pass(self) -> None:
        """Closes the open pass (call when llama_decode returns), then check()."""
        self._close_pass()
        self.check()

    def check(self) -> None:
        """Raises the first error the callback met since the last check, if any."""
        error, self._error = self._error, None
        if error is not None:
            raise error

    @property
    def num_passes(self) -> int:
        """Passes this object has closed since it was made."""
        return self._num_passes

    # -- the callback -----------------------------------------------------------------------

    def _on_eval(self, tensor, ask, user_data) -> bool:
        # NOTE: nothing may raise out of a ctypes callback (ctypes prints it and returns 0).
        try:
            if ask:
                previous = self._previous
                self._previous_wants = previous is not None and bool(
                    previous(tensor, True, self._previous_user_data))
                layer = -1
                if self._recording and self._error is None:
                    if not self._layout_checked:
                        self._check_layout(tensor)
                    name = tensor + _NAME_OFFSET
                    if (_U64_AT(name).value == _PREFIX_WORD
                            and _U64_AT(name + 8).value & _PREFIX_TAIL_MASK == _PREFIX_TAIL):
                        layer = _topk_layer(ctypes.string_at(name))
                self._wanted_layer = layer
                return self._previous_wants or layer >= 0
            keep_going = True
            if self._wanted_layer >= 0:
                try:
                    self._record(tensor, self._wanted_layer)
                except BaseException as error:  # noqa: BLE001 (handed over by check())
                    self._fail(error)
                    keep_going = False
            if self._previous_wants:
                answer = self._previous(tensor, False, self._previous_user_data)
                keep_going = bool(answer) and keep_going
            return keep_going
        except BaseException as error:  # noqa: BLE001
            self._fail(error)
            return False

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        if self._pass_open:
            self._recorder.abort_pass()
        self._pass_open = False

    def _check_layout(self, tensor: int) -> None:
        """The struct's name field against ggml_get_name: another ggml's layout is refused
        rather than misread."""
        expected = self._ggml.get_name(tensor)
        if ctypes.string_at(tensor + _NAME_OFFSET) != expected:
            raise moestat.Error("moestat.llama_cpp: this ggml's struct ggml_tensor is laid out "
                                "otherwise than llama-cpp-python 0.3.36's (the name is not where "
                                "it was): unsupported llama.cpp version")
        self._layout_checked = True

    def _record(self, tensor: int, layer: int) -> None:
        view = _GgmlTensor.from_address(tensor)
        if view.type != _GGML_TYPE_I32 or view.ne[2] != 1 or view.ne[3] != 1:
            raise moestat.Error(f"llama.cpp tensor {view.name.decode(errors='replace')} is not an "
                                "I32 matrix [n_expert_used, n_tokens]")
        top_k, rows = view.ne[0], view.ne[1]
        row_stride, id_stride = view.nb[1], view.nb[0]
        nbytes = (rows - 1) * row_stride + (top_k - 1) * id_stride + 4 if rows > 0 else 0
        if rows > 0 and nbytes != self._ggml.nbytes(tensor):
            raise moestat.Error("moestat.llama_cpp: ggml_nbytes disagrees with the tensor's "
                                "shape and strides: unsupported llama.cpp version")
        # A new micro-batch starts at a layer at or below the last one recorded.
        if self._pass_open and layer <= self._last_layer:
            self._close_pass()
        if not self._pass_open:
            self._recorder.begin_pass(self._num_passes)
            self._pass_open = True
            self._pass_tokens = rows
        self._last_layer = layer
        if rows != self._pass_tokens and self._per_token:
            raise moestat.Error(
                f"llama.cpp layer {layer} routed {rows} of the micro-batch's {self._pass_tokens} "
                "tokens (only those that request output): per-token traces need every token to "
                "request output")
        if rows == 0:
            return  # a last layer without output tokens
        if view.buffer is None or self._ggml.buffer_is_host(view.buffer):
            buffer = (ctypes.c_char * nbytes).from_address(view.data)
        else:  # device memory (CUDA): the view's bytes, strides included, copied to the host
            buffer = ctypes.create_string_buffer(nbytes)
            self._ggml.tensor_get(tensor, buffer, 0, nbytes)
        ids = np.ndarray((rows, top_k), dtype=np.int32, buffer=buffer,
                         strides=(row_stride, id_stride))
        self._recorder.record_topk(layer, ids)

    def _close_pass(self) -> None:
        if not self._pass_open:
            return
        self._pass_open = False
        self._last_layer = -1
        self._recorder.end_pass()
        self._num_passes += 1


# -- models, prompts and files (llama-cpp-python's low-level API) ---------------------------

def _llama_cpp():
    try:
        import llama_cpp  # noqa: PLC0415 (only what needs llama-cpp-python imports it)
    except ImportError as error:
        raise ImportError("moestat.llama_cpp needs llama-cpp-python (pip install "
                          "llama-cpp-python; docs/llama-cpp.md)") from error
    return llama_cpp


def _meta_int(llama_cpp, model, key: str) -> int | None:
    """An integer of the model's GGUF metadata, or None if the key is not there."""
    value = ctypes.create_string_buffer(64)
    if llama_cpp.llama_model_meta_val_str(model, key.encode(), value, len(value)) < 0:
        return None
    text = value.value.decode(errors="replace")
    try:
        return int(text)
    except ValueError:
        raise moestat.Error(f'llama.cpp model metadata {key} is "{text}", not an integer') from None


def model_topology(model) -> moestat.ModelTopology:
    """The topology of a model llama-cpp-python loaded (a ``llama_cpp.llama_model_p``), from
    its GGUF metadata, as the C++ ``moestat::llama_cpp::model_topology``: ``<arch>.block_count``
    layers, the first ``<arch>.leading_dense_block_count`` dense, ``<arch>.expert_count`` experts,
    ``<arch>.expert_used_count`` per token, ``<arch>.expert_group_count`` groups."""
    llama_cpp = _llama_cpp()
    arch = ctypes.create_string_buffer(128)
    if llama_cpp.llama_model_meta_val_str(model, b"general.architecture", arch, len(arch)) < 0:
        raise moestat.Error("llama.cpp model without general.architecture")
    prefix = arch.value.decode(errors="replace") + "."
    num_experts = _meta_int(llama_cpp, model, prefix + "expert_count") or 0
    if num_experts <= 0:
        raise moestat.Error(f"llama.cpp model of architecture {prefix[:-1]} has no experts "
                            f"({prefix}expert_count)")
    num_layers = llama_cpp.llama_model_n_layer(model)
    num_dense = _meta_int(llama_cpp, model, prefix + "leading_dense_block_count") or 0
    top_k = _meta_int(llama_cpp, model, prefix + "expert_used_count") or 1
    return moestat.ModelTopology(
        num_layers, num_experts, top_k,
        moe_layers=[layer >= num_dense for layer in range(num_layers)],
        num_groups=_meta_int(llama_cpp, model, prefix + "expert_group_count") or 1)


def write_snapshot_json(path: str | os.PathLike, snapshot: moestat.Snapshot) -> None:
    """Writes a snapshot as moestat's snapshot JSON (docs/formats.md), what ``moestat
    llama-record`` and ``moestat demo`` write as snapshot.json."""
    tokens = snapshot.num_tokens
    versions_of_pass = dict(zip(snapshot.pass_ids.tolist(), snapshot.placement_versions.tolist()))
    decayed = snapshot.mode == "decayed"
    document = {
        "format": "moestat.snapshot",
        "version": 1,
        "mode": snapshot.mode,
        "approximate": snapshot.approximate,
        "num_layers": snapshot.num_layers,
        "num_logical_experts": snapshot.num_logical_experts,
        "num_physical_experts": snapshot.num_physical_experts,
        "top_k": snapshot.top_k,
        "num_passes": snapshot.num_passes,
        "dropped_ids": snapshot.dropped_ids,
        "dropped_tokens": snapshot.dropped_tokens,
        "dropped_passes": snapshot.dropped_passes,
        "pass_ids": snapshot.pass_ids.tolist(),
        "placement_versions": snapshot.placement_versions.tolist(),
        "pass_num_tokens": snapshot.pass_num_tokens.tolist(),
        "logical_count": snapshot.logical_counts.tolist(),
        "physical_count": snapshot.physical_counts.tolist(),
        "decayed_logical_load": snapshot.decayed_logical_load.tolist() if decayed else [],
        "decayed_physical_load": snapshot.decayed_physical_load.tolist() if decayed else [],
        "token_pass_ids": snapshot.token_pass_ids.tolist() if tokens else [],
        "token_placement_versions": [versions_of_pass.get(pass_id, 0)
                                     for pass_id in snapshot.token_pass_ids.tolist()]
        if tokens else [],
        "token_physical_ids": snapshot.token_physical_ids.tolist() if tokens else [],
        "token_logical_ids": snapshot.token_logical_ids.tolist() if tokens else [],
    }
    path = pathlib.Path(path)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(document, separators=(",", ":")) + "\n")
    os.replace(temporary, path)


def _tokenize(llama_cpp, vocab, text: str) -> list[int]:
    data = text.encode()
    tokens = (llama_cpp.llama_token * (len(data) + 2))()
    count = llama_cpp.llama_tokenize(vocab, data, len(data), tokens, len(tokens), True, False)
    if count < 0:  # more tokens than bytes (byte fallback): the size is -count
        tokens = (llama_cpp.llama_token * -count)()
        count = llama_cpp.llama_tokenize(vocab, data, len(data), tokens, len(tokens), True, False)
    if count < 0:
        raise moestat.Error("llama.cpp could not tokenize a prompt")
    return list(tokens[:count])


def record_prompts(model_path: str | os.PathLike, prompts: list[str],
                   out: str | os.PathLike | None = None, *, n_ctx: int = 2048,
                   n_batch: int = 512, n_threads: int | None = None, mode: str = "stat",
                   gpus: int = 1, moestat_cli: str | None = None) -> moestat.Snapshot:
    """Runs a GGUF model (llama-cpp-python's low-level API) over ``prompts`` and records the
    experts every layer routes each token to, as ``moestat llama-record`` does: every prompt
    from an empty context, in micro-batches of ``n_batch`` tokens (one pass each), every token
    an output (so the last layer routes every token too), no warm-up decode. mode: the
    CpuRecorder's (``stat`` or ``per_token``: snapshot.json then holds every token's ids).

    With ``out``, writes there what ``moestat llama-record`` writes: snapshot.json,
    logical_count.pt and .json (SGLang's stat dump; per_token: the tokens' ids tallied by pass,
    ``pass_counts``) and, when the moestat CLI is found
    (``moestat_cli`` or ``moestat`` on PATH), report.html (``moestat report --gpus gpus``).
    Returns the snapshot."""
    llama_cpp = _llama_cpp()
    prompts = [prompt for prompt in prompts if prompt]
    if not prompts:
        raise moestat.Error("no prompt to record")
    # llama.cpp's progress lines off. NOTE: llama-cpp-python 0.3.36 maps ggml's log levels
    # as they were numbered before (its WARN arrives as logging.ERROR), so only CRITICAL
    # silences the warnings.
    logging.getLogger("llama-cpp-python").setLevel(logging.CRITICAL)
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(os.fsencode(model_path),
                                                 llama_cpp.llama_model_default_params())
    if not model:
        raise moestat.Error(f"llama.cpp could not load the model {os.fspath(model_path)}")
    context = batch = None
    try:
        recorder = moestat.CpuRecorder(model_topology(model), mode=mode, window_size=-1)
        llama_recorder = LlamaCppRecorder(recorder)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = n_batch
        if n_threads is not None:
            params.n_threads = params.n_threads_batch = n_threads
        llama_recorder.attach(params)
        context = llama_cpp.llama_init_from_model(model, params)
        if not context:
            raise moestat.Error(f"llama.cpp could not make a context for {os.fspath(model_path)}")
        vocab = llama_cpp.llama_model_get_vocab(model)
        batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        recorder.start()
        llama_recorder.start()
        for number, prompt in enumerate(prompts, start=1):
            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(context), True)
            tokens = _tokenize(llama_cpp, vocab, prompt)
            if len(tokens) > n_ctx:
                raise moestat.Error(f"prompt {number} has {len(tokens)} tokens, more than "
                                    f"n_ctx {n_ctx}")
            for first in range(0, len(tokens), n_batch):
                chunk = tokens[first:first + n_batch]
                for i, token in enumerate(chunk):
                    batch.token[i] = token
                    batch.pos[i] = first + i
                    batch.n_seq_id[i] = 1
                    batch.seq_id[i][0] = 0
                    batch.logits[i] = 1
                batch.n_tokens = len(chunk)
                result = llama_cpp.llama_decode(context, batch)
                llama_recorder.end_pass()  # the recorder's own error first: why a decode stopped
                if result != 0:
                    raise moestat.Error(f"llama.cpp failed to decode prompt {number} "
                                        f"(llama_decode: {result})")
        llama_recorder.stop()
        recorder.stop()
        snapshot = recorder.snapshot()
    finally:
        if batch is not None:
            llama_cpp.llama_batch_free(batch)
        if context:
            llama_cpp.llama_free(context)
        llama_cpp.llama_model_free(model)
    if out is not None:
        _write_outputs(pathlib.Path(out), snapshot, gpus, moestat_cli)
    return snapshot


def pass_counts(snapshot: moestat.Snapshot) -> np.ndarray:
    """[passes, layers, experts] counts of a snapshot: its window's, or for a per-token one the
    tally of its tokens' logical ids by pass (in the order of their pass ids)."""
    if snapshot.mode != "per_token":
        return snapshot.logical_counts
    pass_ids = snapshot.token_pass_ids
    passes, rows = np.unique(pass_ids, return_inverse=True)
    counts = np.zeros((len(passes), snapshot.num_layers, snapshot.num_logical_experts), np.int64)
    ids = snapshot.token_logical_ids  # [tokens, layers, k], -1 = none
    token_rows = np.broadcast_to(rows[:, None, None], ids.shape)
    layers = np.broadcast_to(np.arange(snapshot.num_layers)[None, :, None], ids.shape)
    valid = ids >= 0
    np.add.at(counts, (token_rows[valid], layers[valid], ids[valid]), 1)
    return counts


def _write_outputs(out: pathlib.Path, snapshot: moestat.Snapshot, gpus: int,
                   moestat_cli: str | None) -> list[pathlib.Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "snapshot.json", out / "logical_count.pt", out / "logical_count.json"]
    write_snapshot_json(written[0], snapshot)
    counts = pass_counts(snapshot)
    moestat.write_logical_counts(written[1], counts)
    moestat.write_logical_counts(written[2], counts)
    cli = moestat_cli or shutil.which("moestat")
    if cli is not None:
        report = out / "report.html"
        # A per-token snapshot's window is empty: its counts by pass are drawn instead.
        drawn = written[0] if snapshot.mode != "per_token" else written[2]
        result = subprocess.run([cli, "report", str(drawn), "--gpus", str(gpus), "--html",
                                 str(report)], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise moestat.Error(f"{cli} report failed: {result.stderr.strip()}")
        written.append(report)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m moestat.llama_cpp",
        description="Run a GGUF model in llama.cpp (llama-cpp-python) over a file of prompts and "
                    "record the experts every layer routes each token to, into the files "
                    "`moestat llama-record` writes.")
    parser.add_argument("model", help="a GGUF file llama.cpp loads")
    parser.add_argument("--prompts", required=True, type=pathlib.Path,
                        help="text file, one prompt per line (empty lines skipped)")
    parser.add_argument("--out", required=True, type=pathlib.Path,
                        help="directory for snapshot.json, logical_count.pt and .json, "
                             "report.html (created if missing)")
    parser.add_argument("--ctx", type=int, default=2048, help="context length (default 2048)")
    parser.add_argument("--batch", type=int, default=512,
                        help="tokens per micro-batch, one recorded pass (default 512)")
    parser.add_argument("--threads", type=int, help="CPU threads (llama.cpp's default if not given)")
    parser.add_argument("--mode", choices=["stat", "per_token"], default="stat")
    parser.add_argument("--gpus", type=int, default=1,
                        help="GPUs the report spreads the experts over (default 1)")
    parser.add_argument("--moestat-cli", help="the moestat CLI for report.html (default: on PATH)")
    arguments = parser.parse_args(argv)
    lines = arguments.prompts.read_text(encoding="utf-8").splitlines()
    prompts = [line.rstrip("\r") for line in lines if line.rstrip("\r")]
    start = time.perf_counter()
    snapshot = record_prompts(arguments.model, prompts, None, n_ctx=arguments.ctx,
                              n_batch=arguments.batch, n_threads=arguments.threads,
                              mode=arguments.mode, gpus=arguments.gpus)
    seconds = time.perf_counter() - start
    tokens = (snapshot.num_tokens if snapshot.mode == "per_token"
              else int(snapshot.pass_num_tokens.sum()))
    print(f"recorded: {len(prompts)} prompts, {tokens} tokens in {snapshot.num_passes} passes "
          f"(micro-batches of up to {arguments.batch}), {seconds:.2f} s")
    written = _write_outputs(arguments.out, snapshot, arguments.gpus, arguments.moestat_cli)
    print(f"wrote: {arguments.out}/ " + ", ".join(path.name for path in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
