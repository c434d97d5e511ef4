"""The harness runs SGLang's real recorder (tests/engines/sglang_harness.py): a smoke test."""
import numpy as np
import torch

from sglang_harness import make_forward_batch, make_metadata


def test_sglang_stat_recorder_runs_under_the_harness(sglang_recorder_module, single_process_group):
    ed, config = sglang_recorder_module
    assert ed.__file__.endswith("sglang/srt/eplb/expert_distribution.py")
    config.exec.moe.expert_distribution_recorder_mode = "stat"
    config.exec.moe.expert_distribution_recorder_buffer_size = 4
    config.device.device = "cpu"
    num_layers, num_logical, num_physical, top_k, num_tokens = 3, 8, 12, 2, 5
    metadata = make_metadata(num_layers, num_logical, num_physical, ep_size=2, device="cpu")
    phy2log = metadata.physical_to_logical_map.numpy()

    recorder = ed.ExpertDistributionRecorder.init_new(metadata, rank=0)
    assert type(recorder).__name__ == "_ExpertDistributionRecorderReal"
    recorder.start_record()
    rng = np.random.default_rng(3)
    tallies = []  # per pass: [num_layers, num_logical] logical counts
    for pass_id in range(6):  # more passes than the window of 4 holds
        tally = np.zeros((num_layers, num_logical), dtype=np.int64)
        with recorder.with_forward_pass(pass_id, make_forward_batch(num_tokens)):
            for layer in range(num_layers):
                with recorder.with_current_layer(layer):
                    ids = rng.integers(-1, num_physical, size=(num_tokens, top_k))  # -1: padding
                    recorder.on_select_experts(torch.from_numpy(ids).to(torch.int32))
                    np.add.at(tally[layer], phy2log[layer][ids[ids >= 0]], 1)
        tallies.append(tally)

    dump = recorder.dump_record("object")
    logical = dump["logical_count"].numpy()
    assert dump["rank"] == 0
    assert logical.shape == (4, num_layers, num_logical)
    # The window is a ring of 4 slots: pass p lands in slot p % 4, the last 4 passes remain.
    for pass_id in range(2, 6):
        np.testing.assert_array_equal(logical[pass_id % 4], tallies[pass_id])
