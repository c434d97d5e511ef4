"""moestat.llama_cpp against real llama-cpp-python (its own Python package, `import llama_cpp`,
loading the libllama that scripts/setup_llama_cpp.sh builds from the same sources): tiny
random-weight MoE models (tiny_moe_gguf.py; qwen3moe, and qwen2moe with a shared expert).

The reference is independent of the recorded ids: a probe callback, set in the parameters
before the recorder attaches (so the recorder chains to it), takes the top-k of each layer's
router probabilities (`ffn_moe_probs-<il>`) here. record_prompts must also write exactly the
snapshot the C++ `moestat llama-record` writes for the same model and prompts.

Run by ctest (tests/llama_cpp/CMakeLists.txt) with PYTHONPATH and LLAMA_CPP_LIB_PATH set;
skipped with the reason where llama-cpp-python's package is not there, failed instead under
MOESTAT_REQUIRE_ENGINE_VENV=1 (CI).
"""

import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import moestat

try:
    import llama_cpp
except ImportError as error:  # pragma: no cover (the skip or CI failure below)
    if os.environ.get("MOESTAT_REQUIRE_ENGINE_VENV") == "1":
        raise
    pytest.skip(f"llama-cpp-python not importable ({error}): run scripts/setup_llama_cpp.sh",
                allow_module_level=True)

from moestat.llama_cpp import LlamaCppRecorder, model_topology, record_prompts

LAYERS, EXPERTS, TOP_K, UBATCH = 3, 8, 2, 16
PROMPT = "Mixture-of-experts models route every token to a few experts; which ones?"
PROMPTS = ["Mixture-of-experts models route every token to a few experts.",
           "Which experts does llama.cpp pick for this line?", "A third prompt, short."]


@pytest.fixture(scope="module", params=["qwen3moe", "qwen2moe"])
def model_path(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / f"{request.param}.gguf"
    subprocess.run([sys.executable, os.environ["MOESTAT_TINY_MOE_GGUF"], request.param, str(path)],
                   env={**os.environ, "PYTHONPATH": os.environ["MOESTAT_LLAMA_GGUF_PY"]},
                   check=True)
    return path


class ProbsTopk:
    """The reference: top-k of `ffn_moe_probs-<il>` ([n_expert, n_tokens] F32) per row."""

    def __init__(self, ggml_name):
        self.on = False
        self.rows = [[] for _ in range(LAYERS)]
        self.ggml_name = ggml_name
        self.callback = llama_cpp.ggml_backend_sched_eval_callback(self._call)

    def _layer(self, tensor):
        name = self.ggml_name(tensor).decode()
        prefix = "ffn_moe_probs-"
        return int(name[len(prefix):]) if self.on and name.startswith(prefix) and \
            name[len(prefix):].isdigit() else -1

    def _call(self, tensor, ask, user_data):
        layer = self._layer(tensor)
        if ask:
            return layer >= 0
        view = moestat.llama_cpp._GgmlTensor.from_address(tensor)
        experts, tokens = view.ne[0], view.ne[1]
        buffer = (ctypes.c_char * (view.nb[1] * tokens)).from_address(view.data)
        probs = np.ndarray((tokens, experts), np.float32, buffer, strides=(view.nb[1], 4))
        for row in probs:
            self.rows[layer].append(sorted(np.argsort(-row, kind="stable")[:TOP_K].tolist()))
        return True

    def counts(self):
        counts = np.zeros((LAYERS, EXPERTS), np.int64)
        for layer, rows in enumerate(self.rows):
            for ids in rows:
                counts[layer, ids] += 1
        return counts


def ggml_get_name():
    library = ctypes.CDLL(moestat.llama_cpp._loaded_library("libggml-base"))
    function = library.ggml_get_name
    function.argtypes, function.restype = [ctypes.c_void_p], ctypes.c_char_p
    return function


class Llama:
    """A model and a context whose eval callback is `probe` (if any) followed by `recorder`."""

    def __init__(self, path, recorder, probe=None):
        llama_cpp.llama_backend_init()
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(),
                                                          llama_cpp.llama_model_default_params())
        assert self.model
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = 256, 256, UBATCH
        params.n_threads = params.n_threads_batch = 1
        if probe is not None:
            params.cb_eval = probe.callback
        if recorder is not None:
            recorder.attach(params)
        self.params = params
        self.context = llama_cpp.llama_init_from_model(self.model, params)
        assert self.context
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)

    def close(self):
        llama_cpp.llama_free(self.context)
        llama_cpp.llama_model_free(self.model)

    def tokenize(self, text):
        data = text.encode()
        tokens = (llama_cpp.llama_token * (4 * len(data) + 2))()
        count = llama_cpp.llama_tokenize(self.vocab, data, len(data), tokens, len(tokens), True,
                                         False)
        assert count > 0
        return list(tokens[:count])

    def decode(self, tokens, first_position, all_outputs=True):
        batch = llama_cpp.llama_batch_init(len(tokens), 0, 1)
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i] = token, first_position + i
            batch.n_seq_id[i], batch.seq_id[i][0] = 1, 0
            batch.logits[i] = all_outputs or i + 1 == len(tokens)
        batch.n_tokens = len(tokens)
        result = llama_cpp.llama_decode(self.context, batch)
        llama_cpp.llama_batch_free(batch)
        return result

    def warm_up(self):
        """What llama.cpp's common_init_from_params does first: {bos, eos}, memory cleared."""
        bos, eos = llama_cpp.llama_vocab_bos(self.vocab), llama_cpp.llama_vocab_eos(self.vocab)
        assert self.decode([bos, eos], 0) == 0
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.context), True)


def test_topology_from_the_model(model_path):
    llama = Llama(model_path, None)
    try:
        assert model_topology(llama.model) == moestat.ModelTopology.uniform(LAYERS, EXPERTS, TOP_K)
    finally:
        llama.close()


def test_counts_equal_the_routers_topk_after_the_warm_up(model_path):
    recorder = moestat.CpuRecorder(moestat.ModelTopology.uniform(LAYERS, EXPERTS, TOP_K),
                                   mode="stat", window_size=-1)
    llama_recorder = LlamaCppRecorder(recorder)
    probe = ProbsTopk(ggml_get_name())
    llama = Llama(model_path, llama_recorder, probe)
    try:
        llama.warm_up()
        recorder.start()
        llama_recorder.start()
        probe.on = True
        prompt = llama.tokenize(PROMPT)
        assert len(prompt) > 2 * UBATCH
        assert llama.decode(prompt, 0) == 0
        llama_recorder.end_pass()
        for step in range(4):
            assert llama.decode([3 + step], len(prompt) + step) == 0
            llama_recorder.end_pass()
    finally:
        llama.close()
    snapshot = recorder.snapshot()
    micro_batches = -(-len(prompt) // UBATCH)
    assert llama_recorder.num_passes == micro_batches + 4
    assert snapshot.window_size == micro_batches + 4
    np.testing.assert_array_equal(snapshot.logical_totals(), probe.counts())
    # Every layer counted every token k times: nothing of the warm-up, nothing twice.
    np.testing.assert_array_equal(snapshot.logical_totals().sum(axis=1),
                                  [(len(prompt) + 4) * TOP_K] * LAYERS)
    np.testing.assert_array_equal(snapshot.pass_num_tokens,
                                  [UBATCH] * (micro_batches - 1)
                                  + [len(prompt) - UBATCH * (micro_batches - 1)] + [1] * 4)


def test_per_token_traces_match_the_routers_topk(model_path):
    recorder = moestat.CpuRecorder(moestat.ModelTopology.uniform(LAYERS, EXPERTS, TOP_K),
                                   mode="per_token")
    llama_recorder = LlamaCppRecorder(recorder)
    probe = ProbsTopk(ggml_get_name())
    llama = Llama(model_path, llama_recorder, probe)
    try:
        llama.warm_up()
        recorder.start()
        llama_recorder.start()
        probe.on = True
        prompt = llama.tokenize(PROMPT)
        assert llama.decode(prompt, 0) == 0
        llama_recorder.end_pass()
    finally:
        llama.close()
    ids = recorder.snapshot().token_logical_ids  # [tokens, layers, k]
    assert ids.shape == (len(prompt), LAYERS, TOP_K)
    for layer in range(LAYERS):
        np.testing.assert_array_equal(np.sort(ids[:, layer, :], axis=1), probe.rows[layer])


def test_per_token_refuses_a_last_layer_of_output_tokens_only(model_path):
    recorder = moestat.CpuRecorder(moestat.ModelTopology.uniform(LAYERS, EXPERTS, TOP_K),
                                   mode="per_token")
    llama_recorder = LlamaCppRecorder(recorder)
    llama = Llama(model_path, llama_recorder)
    try:
        recorder.start()
        llama_recorder.start()
        llama.decode(llama.tokenize(PROMPT)[:UBATCH], 0, all_outputs=False)
        with pytest.raises(moestat.Error, match="per-token traces need every token"):
            llama_recorder.end_pass()
        llama_recorder.check()  # reported once
    finally:
        llama.close()
    assert recorder.snapshot().num_tokens == 0  # the broken pass was dropped


def test_nothing_is_recorded_while_stopped_and_attach_is_once(model_path):
    recorder = moestat.CpuRecorder(moestat.ModelTopology.uniform(LAYERS, EXPERTS, TOP_K),
                                   mode="stat", window_size=-1)
    llama_recorder = LlamaCppRecorder(recorder)
    llama = Llama(model_path, llama_recorder)
    try:
        with pytest.raises(moestat.Error, match="already attached"):
            llama_recorder.attach(llama_cpp.llama_context_default_params())
        with pytest.raises(moestat.Error, match="already hold a LlamaCppRecorder"):
            LlamaCppRecorder(recorder).attach(llama.params)
        recorder.start()
        assert llama.decode(llama.tokenize(PROMPT)[:8], 0) == 0  # recorder not started
        llama_recorder.end_pass()
        assert llama_recorder.num_passes == 0
        llama_recorder.start()
        assert llama.decode([5, 6], 8) == 0
        llama_recorder.stop()
        assert llama.decode([7], 10) == 0
        llama_recorder.end_pass()
    finally:
        llama.close()
    assert llama_recorder.num_passes == 1
    np.testing.assert_array_equal(recorder.snapshot().logical_totals().sum(axis=1), [2 * TOP_K] * 3)


def test_record_prompts_writes_what_llama_record_writes(model_path, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    cli = os.environ["MOESTAT_CLI"]
    subprocess.run([cli, "llama-record", str(model_path), "--prompts", str(prompts), "--out",
                    str(tmp_path / "cli"), "--threads", "1"], check=True, capture_output=True)
    result = subprocess.run([sys.executable, "-m", "moestat.llama_cpp", str(model_path),
                             "--prompts", str(prompts), "--out", str(tmp_path / "python"),
                             "--threads", "1", "--moestat-cli", cli],
                            check=True, capture_output=True, text=True)
    assert "recorded: 3 prompts, 179 tokens in 3 passes" in result.stdout, result.stdout
    for name in ("snapshot.json", "logical_count.json"):
        assert json.loads((tmp_path / "python" / name).read_text()) == \
            json.loads((tmp_path / "cli" / name).read_text()), name
    np.testing.assert_array_equal(moestat.read_logical_counts(tmp_path / "python/logical_count.pt"),
                                  moestat.read_logical_counts(tmp_path / "cli/logical_count.pt"))
    assert (tmp_path / "python" / "report.html").stat().st_size > 0
    # The per-token snapshot reads back, its tokens those of the prompts.
    result = subprocess.run([sys.executable, "-m", "moestat.llama_cpp", str(model_path),
                             "--prompts", str(prompts), "--out", str(tmp_path / "tokens_cli"),
                             "--threads", "1", "--moestat-cli", cli, "--mode", "per_token"],
                            check=True, capture_output=True, text=True)
    assert "recorded: 3 prompts, 179 tokens in 3 passes" in result.stdout, result.stdout
    snapshot = record_prompts(model_path, PROMPTS, tmp_path / "tokens", mode="per_token",
                              n_threads=1, moestat_cli=cli)
    assert snapshot.num_tokens == 179 and snapshot.num_passes == 3
    counts = moestat.read_logical_counts(tmp_path / "tokens" / "logical_count.json")
    np.testing.assert_array_equal(counts, moestat.read_logical_counts(tmp_path / "cli/logical_count.json"))
    document = json.loads((tmp_path / "tokens" / "snapshot.json").read_text())
    np.testing.assert_array_equal(document["token_logical_ids"], snapshot.token_logical_ids)
