"""moestat.vllm.worker against vLLM 0.33.0's own worker machinery on the CPU: vLLM's
WorkerWrapperBase mixes RecordingExtension into a worker class (its --worker-extension-cls
path, conflict check included) and calls its init/destroy hooks; the worker loads
vllm_stand_in_model.py's model (routers from vLLM's own router factory), warms it up, and runs
steps. The dump must equal a numpy tally of the ids vLLM's routers returned in the steps after
warm-up. Across two processes (gloo, vLLM's parallel state): data-parallel ranks' counts are
summed, a tensor-parallel group's are taken once, and under naive dispatch (vLLM's own
dispatcher gathering both ranks' padded rows before routing) each rank counts its own real
rows of the gathered ones. Across four (sequence-parallel MoE): each rank its share's.

Skipped where vLLM's modules do not import (vllm_harness.py says when that is an error).
"""
import contextlib
import os
import types

import numpy as np
import pytest

import vllm_harness  # noqa: F401 - first: vLLM's modules, or a skip
from vllm_harness import vllm_gloo_world  # noqa: F401 - a fixture, used by name

import torch

try:
    from vllm.config import ModelConfig, ParallelConfig, VllmConfig, set_current_vllm_config
    from vllm.v1.worker.worker_base import WorkerBase, WorkerWrapperBase
    from vllm_stand_in_model import HIDDEN, NUM_EXPERTS, NUM_LAYERS, TOP_K, Model, tally
except Exception as error:  # pragma: no cover - vLLM without its worker modules' imports
    pytest.skip(f"vLLM's worker modules do not import: {error!r}", allow_module_level=True)

import moestat
from moestat.vllm import recording as moestat_recording
from moestat.vllm import worker as moestat_worker

EXTENSION = "moestat.vllm.worker.RecordingExtension"
STEPS = [5, 1, 12]  # tokens per step after warm-up


class StandInWorker(WorkerBase):
    """What RecordingExtension uses of vLLM's GPU worker (gpu_worker.py): vllm_config,
    load_model, compile_or_warm_up_model (one forward: vLLM's warm-up and graph captures),
    get_model; step() stands for execute_model."""

    def __init__(self, vllm_config, seed=0, **kwargs):
        self.vllm_config = vllm_config
        self.seed = seed
        self.model = None

    def init_device(self):
        pass

    def load_model(self):
        self.model = Model(seed=self.seed)

    def compile_or_warm_up_model(self):
        with torch.no_grad():
            self.model(torch.randn(8, HIDDEN))

    def get_model(self):
        return self.model

    def step(self, tokens, generator):
        with torch.no_grad():
            self.model(torch.randn(tokens, HIDDEN, generator=generator))

    def shutdown(self):
        pass


@pytest.fixture(scope="module")
def model_config(tmp_path_factory):
    """vLLM's ModelConfig of a small Qwen3-MoE config written to disk (no weights, no
    tokenizer): the layer count RecordingExtension reads, and what vLLM's worker wrapper reads."""
    from transformers import Qwen3MoeConfig

    directory = tmp_path_factory.mktemp("qwen3-moe-config")
    Qwen3MoeConfig(num_hidden_layers=NUM_LAYERS, num_experts=NUM_EXPERTS,
                   num_experts_per_tok=TOP_K, hidden_size=HIDDEN, intermediate_size=16,
                   moe_intermediate_size=8, num_attention_heads=2, num_key_value_heads=1,
                   head_dim=4, vocab_size=64).save_pretrained(directory)
    return ModelConfig(model=str(directory), skip_tokenizer_init=True)


def wrapped_worker(model_config):
    """A worker built as vLLM builds one: WorkerWrapperBase.init_worker with the extension."""
    parallel_config = ParallelConfig(worker_cls=f"{__name__}.StandInWorker",
                                     worker_extension_cls=EXTENSION)
    config = VllmConfig(model_config=model_config, parallel_config=parallel_config)
    wrapper = WorkerWrapperBase(rpc_rank=0)
    wrapper.init_worker([{"vllm_config": config}])
    wrapper.init_device()  # vLLM calls init_worker_extension here
    assert isinstance(wrapper.worker, moestat_worker.RecordingExtension)
    return wrapper


def expected_after_warm_up(model, steps):
    """[steps, layers, experts]: the tally of each step (call 0 was the warm-up)."""
    return np.stack([tally(model, call + 1) for call in range(steps)])


def test_with_the_variable_a_server_records_after_warm_up_and_dumps_at_shutdown(
        vllm_gloo_world, model_config, tmp_path, monkeypatch):
    monkeypatch.setenv(moestat_worker.ENV_RECORD_DIR, str(tmp_path / "routing"))
    wrapper = wrapped_worker(model_config)
    wrapper.load_model()                 # attaches, stopped
    wrapper.compile_or_warm_up_model()   # not counted; starts recording afterwards
    generator = torch.Generator().manual_seed(1)
    for tokens in STEPS:
        wrapper.step(tokens, generator)
    recorder_id = wrapper.worker.moestat_recording.handle.recorder_id
    wrapper.shutdown()                   # vLLM calls destroy_worker_extension here
    # Detached: nothing of the recording is left to outlive the worker.
    assert wrapper.worker.moestat_recording is None
    assert recorder_id not in moestat_recording._handles
    dump = moestat.read_counts(str(tmp_path / "routing" / moestat_worker.DUMP_NAME))
    expected = expected_after_warm_up(wrapper.get_model(), len(STEPS))
    np.testing.assert_array_equal(dump["counts"], expected)
    assert expected.sum() == sum(STEPS) * TOP_K * 3


def test_a_dump_that_cannot_be_written_at_shutdown_is_logged_and_shutdown_goes_on(
        vllm_gloo_world, model_config, tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(moestat_worker.ENV_RECORD_DIR, str(blocker / "routing"))
    wrapper = wrapped_worker(model_config)
    wrapper.load_model()
    wrapper.compile_or_warm_up_model()
    wrapper.step(3, torch.Generator().manual_seed(3))
    with caplog.at_level("ERROR", logger=moestat_worker.__name__):
        wrapper.shutdown()  # vLLM's shutdown must not fail for moestat's dump
    ours = [record for record in caplog.records if record.name == moestat_worker.__name__]
    assert [record.getMessage() for record in ours] == ["moestat: writing the routing dump failed"]
    assert ours[0].exc_info is not None  # with the reason


def test_collective_rpc_calls_start_stop_reset_and_dump(vllm_gloo_world, model_config, tmp_path):
    wrapper = wrapped_worker(model_config)
    wrapper.load_model()
    with pytest.raises(moestat.Error, match="not recording"):
        wrapper.moestat_dump(str(tmp_path / "early.json"))
    wrapper.moestat_start()
    with pytest.raises(moestat.Error, match="already recording"):
        wrapper.moestat_attach()
    generator = torch.Generator().manual_seed(2)
    for tokens in STEPS:
        wrapper.step(tokens, generator)
    wrapper.moestat_stop()
    wrapper.step(4, generator)           # stopped: not counted
    model = wrapper.get_model()
    expected = np.stack([tally(model, call) for call in range(len(STEPS))])
    np.testing.assert_array_equal(wrapper.moestat_counts(), expected)
    path = tmp_path / "out" / "routing.safetensors"
    assert wrapper.moestat_dump(str(path)) == str(path)
    np.testing.assert_array_equal(moestat.read_counts(str(path))["counts"], expected)
    wrapper.moestat_reset()
    assert wrapper.moestat_counts().shape[0] == 0
    wrapper.moestat_detach()
    assert all(moe.router.capture_fn is None for moe in model.moe().values())


def test_a_window_that_is_not_a_number_of_passes_is_refused(vllm_gloo_world, model_config,
                                                           tmp_path, monkeypatch):
    monkeypatch.setenv(moestat_worker.ENV_RECORD_DIR, str(tmp_path))
    monkeypatch.setenv(moestat_worker.ENV_RECORD_WINDOW, "ten")
    wrapper = wrapped_worker(model_config)
    with pytest.raises(moestat.Error, match="MOESTAT_VLLM_RECORD_WINDOW='ten'"):
        wrapper.load_model()


# --- two processes -------------------------------------------------------------------------

class RankWorker(StandInWorker, moestat_worker.RecordingExtension):
    """The class vLLM's wrapper makes (the extension appended to the worker's bases)."""

    def step_in_forward_context(self, real, sizes, dp_rank, generator):
        """A step as vLLM's model runner runs one under data parallelism: sizes[dp_rank] rows,
        the real ones first, inside the forward context with the padding mask and every
        data-parallel rank's padded rows (what the naive dispatcher gathers by)."""
        from vllm.forward_context import set_forward_context

        padded = sizes[dp_rank]
        with torch.no_grad(), set_forward_context(
                None, self.vllm_config, num_tokens=padded,
                num_tokens_across_dp=torch.tensor(sizes, dtype=torch.int32),
                is_padding=torch.arange(padded) >= real):
            self.model(torch.randn(padded, HIDDEN, generator=generator))


# (name, tensor parallel size, whether the MoE layers dispatch naively: routing gathered rows;
# "compiled": their routers under torch.compile, as vLLM compiles a model around its MoE layers)
SCENARIOS = (("data_parallel", 1, False), ("tensor_parallel", 2, False), ("gathered", 1, True),
             ("gathered_compiled", 1, "compiled"))
# Naive dispatch: each step's (real, padded) rows of rank 0 and of rank 1, padded as vLLM's
# model runner pads (padding last); rank 1's last step is an idle rank's dummy batch.
GATHERED_STEPS = (((5, 8), (3, 4)), ((1, 1), (12, 16)), ((12, 12), (0, 2)))


def gloo_all_gatherv(communicator, input_, dim=0, sizes=None):
    """vLLM's CPU communicator has no all_gatherv (its base class raises NotImplementedError);
    this is what its CUDA communicator's does, over the group's gloo group: each rank's rows
    (sizes[rank] of them) concatenated in rank order along dim 0, for a tensor or a list."""
    import torch.distributed as dist

    assert dim == 0
    if not isinstance(input_, torch.Tensor):
        return [gloo_all_gatherv(communicator, tensor, dim, sizes) for tensor in input_]
    group, most = communicator.cpu_group, max(sizes)
    padded = torch.zeros((most, *input_.shape[1:]), dtype=input_.dtype)
    padded[:input_.shape[0]] = input_
    chunks = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(chunks, padded, group=group)
    return torch.cat([chunk[:size] for chunk, size in zip(chunks, sizes)])


def run_gathered_steps(worker, rank, generator, out):
    """GATHERED_STEPS through vLLM's dispatcher; saves what this rank's own real rows of each
    step's gathered routing count (the expectation) and layer 1's gathered ids."""
    expected = []
    for step in GATHERED_STEPS:
        real, _ = step[rank]
        sizes = [padded for _, padded in step]
        worker.step_in_forward_context(real, sizes, rank, generator)
        call = len(expected)
        expected.append(tally(worker.get_model(), call, real, first=sum(sizes[:rank])))
    np.save(out / f"expected{rank}.npy", np.stack(expected))
    routed = worker.get_model().moe()[1].routed
    np.save(out / f"routed{rank}.npy", np.concatenate([ids.numpy() for ids in routed]))


@contextlib.contextmanager
def rank_worker(rank, world_size, store, tensor_parallel):
    """This process's rank in vLLM's parallel state over gloo (expert parallel on) and its
    worker, the model loaded, not recording yet; torn down afterwards."""
    from vllm.distributed import parallel_state
    from vllm.distributed.parallel_state import get_ep_group
    from vllm.distributed.device_communicators.cpu_communicator import CpuCommunicator

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size))
    CpuCommunicator.all_gatherv = gloo_all_gatherv  # what naive dispatch needs of it
    # external_launcher: vLLM takes world size and rank as given (one process per rank, as
    # torchrun starts them) and builds its groups from the config's sizes
    config = VllmConfig(parallel_config=ParallelConfig(
        distributed_executor_backend="external_launcher", tensor_parallel_size=tensor_parallel,
        data_parallel_size=world_size // tensor_parallel, enable_expert_parallel=True))
    with set_current_vllm_config(config):
        parallel_state.init_distributed_environment(world_size, rank, f"file://{store}", rank,
                                                    "gloo")
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=tensor_parallel,
                                                 backend="gloo")
        assert get_ep_group().world_size == world_size
        worker = RankWorker(config)
        worker.init_worker_extension()
        worker.load_model()
        yield worker
        parallel_state.destroy_model_parallel()
        parallel_state.destroy_distributed_environment()


def run_rank(rank, world_size, store, out):
    """One rank of each scenario. A tensor-parallel group's ranks route the same tokens (seeded
    alike); data-parallel ranks route their own, and rank 1 one step fewer; under naive dispatch
    each rank its own rows, gathered by vLLM's dispatcher (GATHERED_STEPS)."""
    for name, tensor_parallel, gathered in SCENARIOS:
        with rank_worker(rank, world_size, f"{store}-{name}", tensor_parallel) as worker:
            for moe in worker.get_model().moe().values():
                moe.do_naive_dispatch_combine = bool(gathered)  # as vLLM's MoERunner says
                if gathered == "compiled":
                    moe.route = torch.compile(moe.router.select_experts, fullgraph=True)
            worker.moestat_start()
            own_tokens = tensor_parallel == 1
            generator = torch.Generator().manual_seed(10 + (rank if own_tokens else 0))
            if gathered:
                run_gathered_steps(worker, rank, generator, out / name)
            else:
                for tokens in STEPS if rank == 0 or not own_tokens else STEPS[:-1]:
                    worker.step(tokens, generator)
            np.save(out / name / f"rank{rank}.npy", worker.moestat_counts())
            worker.moestat_dump(str(out / name / "dump.json"))


def test_two_ranks_dump_every_token_once(tmp_path):
    for name, _, _ in SCENARIOS:
        (tmp_path / name).mkdir()
    torch.multiprocessing.spawn(run_rank, args=(2, tmp_path / "store", tmp_path), nprocs=2)

    def results(name):
        ranks = [np.load(tmp_path / name / f"rank{r}.npy") for r in range(2)]
        return ranks, moestat.read_counts(str(tmp_path / name / "dump.json"))["counts"]

    # data parallel: the sum, the rank with fewer passes lined up with the last ones
    (rank0, rank1), dump = results("data_parallel")
    assert rank0.shape[0] == len(STEPS) and rank1.shape[0] == len(STEPS) - 1
    assert rank1.sum() > 0 and not np.array_equal(rank0[:-1], rank1)
    expected = rank0.copy()
    expected[1:] += rank1
    np.testing.assert_array_equal(dump, expected)
    # tensor parallel: both ranks routed the same tokens, counted once
    (rank0, rank1), dump = results("tensor_parallel")
    np.testing.assert_array_equal(rank0, rank1)
    np.testing.assert_array_equal(dump, rank0)
    # naive dispatch: both ranks routed the same gathered rows (vLLM's dispatcher gathered
    # them), each counted its own real rows of them, and the dump every token once; eagerly
    # and with the routers compiled (moestat_vllm::record_topk finds the rows where it runs)
    for name in ("gathered", "gathered_compiled"):
        ranks, dump = results(name)
        gathered = tmp_path / name
        np.testing.assert_array_equal(np.load(gathered / "routed0.npy"),
                                      np.load(gathered / "routed1.npy"))
        for rank, counts in enumerate(ranks):
            np.testing.assert_array_equal(counts, np.load(gathered / f"expected{rank}.npy"))
        np.testing.assert_array_equal(dump, ranks[0] + ranks[1])
        real_rows = [sum(step[rank][0] for step in GATHERED_STEPS) for rank in range(2)]
        assert [int(counts.sum()) for counts in ranks] == [rows * TOP_K * 3 for rows in real_rows]
        assert int(ranks[1][-1].sum()) == 0  # the dummy batch


# --- four processes: sequence-parallel MoE --------------------------------------------------

# Each step's (real, padded) rows of data-parallel rank 0 and rank 1; with tensor parallel 2
# each tensor-parallel rank routes its share (vLLM's sequence_parallel_chunk: the batch padded
# to a multiple of 2, halved). 7 rows: shares of 4, the second with 1 real row and 1 the chunk
# padded; rank 1's last step a dummy batch.
SP_STEPS = (((5, 7), (3, 4)), ((1, 1), (0, 3)))
SP_TENSOR_PARALLEL = 2


def share_real_rows(real, padded, tp_rank):
    """(first row of the share, its real rows) of a tensor-parallel rank's share."""
    share = -(-padded // SP_TENSOR_PARALLEL)
    first = tp_rank * share
    return first, max(0, min(real - first, share))


def run_sequence_parallel_rank(rank, world_size, store, out):
    """Both scenarios: each rank routes its share, alone and gathered over the expert-parallel
    group by vLLM's dispatcher (naive dispatch, the sequence-parallel sizes)."""
    from vllm.distributed import get_tensor_model_parallel_rank
    from vllm.distributed.parallel_state import get_ep_group

    for name, gathered in (("shares", False), ("shares_gathered", True)):
        with rank_worker(rank, world_size, f"{store}-{name}", SP_TENSOR_PARALLEL) as worker:
            parallel_config = worker.vllm_config.parallel_config
            assert parallel_config.use_sequence_parallel_moe
            dp_rank, tp_rank = parallel_config.data_parallel_rank, get_tensor_model_parallel_rank()
            for moe in worker.get_model().moe().values():  # as vLLM's MoERunner says
                moe.do_naive_dispatch_combine = gathered
                moe.moe_config = types.SimpleNamespace(
                    is_sequence_parallel=True, sp_size=SP_TENSOR_PARALLEL, pcp_size=1,
                    use_ep=True)
            worker.moestat_start()
            generator = torch.Generator().manual_seed(20 + dp_rank)  # a TP group's tokens
            expected = []
            for call, step in enumerate(SP_STEPS):
                real, padded = step[dp_rank]
                sizes = [rows for _, rows in step]
                worker.step_in_forward_context(real, sizes, dp_rank, generator)
                first, share_real = share_real_rows(real, padded, tp_rank)
                if gathered:  # the shares of the expert-parallel group, in its rank order
                    shares = [-(-rows // SP_TENSOR_PARALLEL) for rows in sizes
                              for _ in range(SP_TENSOR_PARALLEL)]
                    first = sum(shares[:get_ep_group().rank_in_group])
                else:
                    first = 0
                expected.append(tally(worker.get_model(), call, share_real, first=first))
            np.save(out / name / f"expected{rank}.npy", np.stack(expected))
            np.save(out / name / f"rank{rank}.npy", worker.moestat_counts())
            worker.moestat_dump(str(out / name / "dump.json"))


def test_four_ranks_of_sequence_parallel_moe_count_each_share_once(tmp_path):
    for name in ("shares", "shares_gathered"):
        (tmp_path / name).mkdir()
    torch.multiprocessing.spawn(run_sequence_parallel_rank,
                                args=(4, tmp_path / "store", tmp_path), nprocs=4)
    real_rows = sum(real for step in SP_STEPS for real, _ in step)
    for name in ("shares", "shares_gathered"):
        ranks = [np.load(tmp_path / name / f"rank{r}.npy") for r in range(4)]
        for rank, counts in enumerate(ranks):
            np.testing.assert_array_equal(
                counts, np.load(tmp_path / name / f"expected{rank}.npy"), err_msg=name)
        dump = moestat.read_counts(str(tmp_path / name / "dump.json"))["counts"]
        np.testing.assert_array_equal(dump, sum(ranks))  # every rank routes a share
        assert int(dump.sum()) == real_rows * TOP_K * 3, name  # every token once
