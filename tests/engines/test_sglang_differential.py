"""moestat's recorders against SGLang's real expert-distribution recorder (placeholder until the
differential tests land: SGLang's init_new builds its real recorder under the harness)."""
import sglang_harness


def test_sglang_init_new_builds_its_real_recorder(sglang_recorder_module):
    module, config = sglang_recorder_module
    config.exec.moe.expert_distribution_recorder_mode = "stat"
    recorder = module.ExpertDistributionRecorder.init_new(sglang_harness.make_metadata(2, 4, 4, 1),
                                                          rank=0)
    assert type(recorder).__name__ == "_ExpertDistributionRecorderReal"
