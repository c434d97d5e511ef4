"""Host time of moestat.sglang's dump_record on the CPU: a stat dump (SGLang's buffer of 1000
passes, output_mode "object" as SGLang's EPLB manager asks for it, and "file") and a per_pass
file, after 1000 recorded passes of 48 layers x 128 experts, 64 tokens of top-8 each.

    PYTHONPATH=build/python .venv-engines/bin/python bench/sglang_dump_cost.py SIDE

Prints one JSON line per dump: milliseconds of the calling thread's CPU time for the
dump_record call (the median of 3 recorders), tagged with SIDE (a label of the tree measured,
e.g. "before" and "after" with PYTHONPATH naming two package trees).
"""

import json
import os
import sys
import tempfile
import time
import types

import torch

from moestat.sglang.config import RecorderConfig
from moestat.sglang.recorder import MoestatExpertDistributionRecorder

LAYERS, EXPERTS, PASSES, TOKENS, TOP_K = 48, 128, 1000, 64, 8


def filled_recorder(mode, ids):
    metadata = types.SimpleNamespace(
        num_layers=LAYERS, num_logical_experts=EXPERTS, num_physical_experts=EXPERTS, ep_size=1,
        physical_to_logical_map=torch.arange(EXPERTS).repeat(LAYERS, 1))
    recorder = MoestatExpertDistributionRecorder(
        metadata, 0, RecorderConfig(mode=mode, buffer_size=1000, device="cpu"))
    recorder.start_record()
    batch = types.SimpleNamespace()
    for pass_id in range(PASSES):
        with recorder.with_forward_pass(pass_id, batch):
            for layer in range(LAYERS):
                with recorder.with_current_layer(layer):
                    recorder.on_select_experts(ids)
    return recorder


def dump_ms(mode, output_mode):
    ids = torch.randint(0, EXPERTS, (TOKENS, TOP_K), dtype=torch.int32)
    times = []
    for _ in range(3):
        with tempfile.TemporaryDirectory() as directory:
            os.environ["SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR"] = directory
            recorder = filled_recorder(mode, ids)
            start = time.process_time()
            recorder.dump_record(output_mode)
            times.append(time.process_time() - start)
    return sorted(times)[1] * 1000


def main():
    torch.set_num_threads(1)
    side = sys.argv[1] if len(sys.argv) > 1 else "this"
    for mode, output_mode in [("stat", "object"), ("stat", "file"), ("per_pass", "file")]:
        print(json.dumps(dict(side=side, mode=mode, output_mode=output_mode,
                              ms=round(dump_ms(mode, output_mode), 1))), flush=True)


if __name__ == "__main__":
    main()
