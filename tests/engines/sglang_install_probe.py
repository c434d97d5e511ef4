"""Run as a module by test_sglang_install.py through moestat.sglang.launch_server: reports
whether this process and a process it spawns (as SGLang starts its schedulers) build
moestat's recorder from SGLang's ``init_new``."""

import multiprocessing
import sys


def recorder_class_name():
    import sglang_harness

    module, config = sglang_harness.load_sglang_expert_distribution()
    config.exec.moe.expert_distribution_recorder_mode = "stat"
    metadata = sglang_harness.make_metadata(2, 4, 4, 1)
    return type(module.ExpertDistributionRecorder.init_new(metadata, rank=0)).__name__


def _child(queue):
    queue.put(recorder_class_name())


if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_child, args=(queue,))
    child.start()
    spawned = queue.get(timeout=120)
    child.join()
    print(f"launcher={recorder_class_name()} spawned={spawned} args={sys.argv[1:]}")
