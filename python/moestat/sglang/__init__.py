"""moestat behind SGLang's expert-distribution recorder interface (sglang 0.5.23).

Switch a deployment: ``python -m moestat.sglang.launch_server <the usual arguments>``, or
``moestat.sglang.install()`` in a process that runs SGLang. Engines of their own call the
same interface directly:

    from moestat.sglang import ExpertDistributionRecorder
    recorder = ExpertDistributionRecorder.init_new(metadata, rank, mode="stat", buffer_size=1000)
    recorder.start_record()
    with recorder.with_forward_pass(step, forward_batch):
        for i, layer in enumerate(model.layers):
            with recorder.with_current_layer(i):
                recorder.on_select_experts(topk_ids)
    dump = recorder.dump_record(output_mode="object")

Needs torch. docs/sglang.md says what differs from SGLang and why.
"""

from .config import RecorderConfig
from .install import install, install_on_import
from .metadata import ExpertLocation
from .recorder import (
    ExpertDistributionRecorder,
    MoestatExpertDistributionRecorder,
    NoopExpertDistributionRecorder,
)
from .registry import get_global_expert_distribution_recorder, set_global_expert_distribution_recorder

__all__ = [
    "ExpertDistributionRecorder",
    "ExpertLocation",
    "MoestatExpertDistributionRecorder",
    "NoopExpertDistributionRecorder",
    "RecorderConfig",
    "get_global_expert_distribution_recorder",
    "install",
    "install_on_import",
    "set_global_expert_distribution_recorder",
]
