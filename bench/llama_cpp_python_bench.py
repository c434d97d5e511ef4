#!/usr/bin/env python3
"""What moestat.llama_cpp (the Python recorder in llama-cpp-python's cb_eval) costs: tokens per
second of a prompt pass and of a decode with no callback, with the recorder attached but
stopped, and recording counts, in the same run, the modes taking turns at every pass and step, as
bench/llama_cpp/llama_record_bench.cpp does for the C++ recorder (bench/llama_cpp_bench.sh runs
both; docs/BENCHMARKS.md).

    PYTHONPATH=build/python:.deps/llama.cpp/0.3.36/python \\
    LLAMA_CPP_LIB_PATH=.deps/llama.cpp/0.3.36/build/bin \\
        python3 bench/llama_cpp_python_bench.py MODEL.gguf [--threads N] [--repeats R]
"""

import argparse
import logging
import statistics
import time

import numpy as np

import llama_cpp
import moestat
from moestat.llama_cpp import LlamaCppRecorder, model_topology

MODES = ["off", "py_stopped", "py_stat"]


class Runner:
    def __init__(self, model, arguments, mode):
        self.mode = mode
        self.llama_recorder = None
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = arguments.prompt_tokens + arguments.decode_tokens + 16
        params.n_batch = params.n_ubatch = arguments.prompt_tokens
        params.n_threads = params.n_threads_batch = arguments.threads
        if mode != "off":
            self.recorder = moestat.CpuRecorder(model_topology(model), mode="stat",
                                                window_size=1000)
            self.llama_recorder = LlamaCppRecorder(self.recorder)
            self.llama_recorder.attach(params)
            self.recorder.start()
            if mode == "py_stat":
                self.llama_recorder.start()
        self.params = params
        self.context = llama_cpp.llama_init_from_model(model, params)
        assert self.context, "llama.cpp could not make a context"
        self.batch = llama_cpp.llama_batch_init(arguments.prompt_tokens, 0, 1)
        self.position = 0

    def decode(self, tokens, first, last_output):
        batch = self.batch
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i] = token, first + i
            batch.n_seq_id[i], batch.seq_id[i][0] = 1, 0
            batch.logits[i] = last_output or i + 1 == len(tokens)
        batch.n_tokens = len(tokens)
        result = llama_cpp.llama_decode(self.context, batch)
        if self.llama_recorder is not None:
            self.llama_recorder.end_pass()
        assert result == 0, f"llama_decode: {result}"
        llama_cpp.llama_get_logits_ith(self.context, -1)

    def timed(self, tokens, first):
        """Wall and CPU seconds (every thread of the process) of one llama_decode."""
        start, start_cpu = time.perf_counter(), time.process_time()
        self.decode(tokens, first, True)  # every token an output, as the C++ benchmark
        return time.perf_counter() - start, time.process_time() - start_cpu

    def prompt(self, tokens):
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.context), True)
        self.position = len(tokens)
        return self.timed(tokens, 0)

    def step(self, token):
        self.position += 1
        return self.timed([token], self.position - 1)

    def passes(self):
        return 0 if self.llama_recorder is None else self.llama_recorder.num_passes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--gpu-layers", type=int, default=0)
    arguments = parser.parse_args()

    logging.getLogger("llama-cpp-python").setLevel(logging.CRITICAL)  # its progress lines off
    llama_cpp.llama_backend_init()
    model_params = llama_cpp.llama_model_default_params()
    model_params.n_gpu_layers = arguments.gpu_layers
    model = llama_cpp.llama_model_load_from_file(arguments.model.encode(), model_params)
    assert model, f"llama.cpp could not load {arguments.model}"
    vocabulary = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    random = np.random.default_rng(7)
    prompt = random.integers(3, vocabulary, arguments.prompt_tokens).tolist()
    steps = random.integers(3, vocabulary, arguments.decode_tokens).tolist()

    runners = [Runner(model, arguments, mode) for mode in MODES]
    for runner in runners:  # warm-up round, not timed
        runner.prompt(prompt)
        runner.step(steps[0])
    # The modes take turns at every prompt pass and decode step, each round in another order;
    # each mode's time is compared with `off`'s of the same round (as the C++ benchmark).
    rate = [[[[] for _ in MODES] for _ in range(2)] for _ in range(2)]  # [phase][clock][mode]
    ratio = [[[[] for _ in MODES] for _ in range(2)] for _ in range(2)]
    rounds = 0

    def add_round(phase, times, tokens):
        for m in range(len(MODES)):
            for clock in range(2):
                rate[phase][clock][m].append(tokens / times[m][clock])
                ratio[phase][clock][m].append(times[0][clock] / times[m][clock])

    for _ in range(arguments.repeats):
        times = [None] * len(MODES)
        for i in range(len(MODES)):
            m = (i + rounds) % len(MODES)
            times[m] = runners[m].prompt(prompt)
        rounds += 1
        add_round(0, times, len(prompt))
        for token in steps:
            for i in range(len(MODES)):
                m = (i + rounds) % len(MODES)
                times[m] = runners[m].step(token)
            rounds += 1
            add_round(1, times, 1)
    print(f"llama-cpp-python {llama_cpp.__version__}: {arguments.repeats} repeats of a "
          f"{arguments.prompt_tokens}-token prompt pass and {arguments.decode_tokens} decode steps; "
          "modes in turn; medians over rounds")
    for clock, name in enumerate(["wall time", "CPU time of every thread"]):
        print(f"{'mode':<10} {'prompt tok/s':>14} {'vs off':>10} {'decode tok/s':>14} "
              f"{'vs off':>10} {'passes':>8}   ({name})")
        for m, mode in enumerate(MODES):
            print(f"{mode:<10} {statistics.median(rate[0][clock][m]):>14.1f} "
                  f"{statistics.median(ratio[0][clock][m]):>10.4f} "
                  f"{statistics.median(rate[1][clock][m]):>14.2f} "
                  f"{statistics.median(ratio[1][clock][m]):>10.4f} {runners[m].passes():>8}")

if __name__ == "__main__":
    main()
