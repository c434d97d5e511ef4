"""moestat.sglang.install(): SGLang's own call sites get moestat's recorder."""

import os
import pathlib
import subprocess
import sys

import sglang_harness

import moestat.sglang
from moestat.sglang import launch_server

HERE = pathlib.Path(__file__).resolve().parent


def test_install_makes_sglangs_init_new_build_moestats_recorder_and_swaps_the_live_one(
        sglang_recorder_module, single_process_group):
    module, config = sglang_recorder_module
    config.exec.moe.expert_distribution_recorder_mode = "stat"
    metadata = sglang_harness.make_metadata(2, 4, 4, 1)
    live = module.ExpertDistributionRecorder.init_new(metadata, rank=0)
    assert type(live).__name__ == "_ExpertDistributionRecorderReal"
    live.start_record()
    module.set_global_expert_distribution_recorder(live)
    original_init_new = module.ExpertDistributionRecorder.__dict__["init_new"]
    try:
        installed = moestat.sglang.install()
        assert moestat.sglang.install() is installed  # idempotent
        current = module.get_global_expert_distribution_recorder()
        assert current is installed
        assert isinstance(current, moestat.sglang.MoestatExpertDistributionRecorder)
        assert current.recording  # it was recording, it still is
        # SGLang's model runner makes its recorder through init_new:
        made = module.ExpertDistributionRecorder.init_new(metadata, rank=0)
        assert isinstance(made, moestat.sglang.MoestatExpertDistributionRecorder)
        # and moestat's getter sees what SGLang's setter set.
        assert moestat.sglang.get_global_expert_distribution_recorder() is current
        config.exec.moe.expert_distribution_recorder_mode = None
        assert isinstance(module.ExpertDistributionRecorder.init_new(metadata, rank=0),
                          moestat.sglang.NoopExpertDistributionRecorder)
    finally:
        module.ExpertDistributionRecorder.init_new = original_init_new
        del module.ExpertDistributionRecorder._moestat_installed
        module.set_global_expert_distribution_recorder(None)


def test_the_launcher_installs_in_every_process_of_the_server(tmp_path):
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(HERE), *[p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p]])
    code = ("from moestat.sglang.launch_server import main; "
            "main(['--model-path', 'x'], module='sglang_install_probe')")
    result = subprocess.run([sys.executable, "-c", code], env=environment, cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert ("launcher=MoestatExpertDistributionRecorder spawned=MoestatExpertDistributionRecorder "
            "args=['--model-path', 'x']") in result.stdout


def test_the_launcher_keeps_the_callers_python_path():
    environment = launch_server.server_environment({"PYTHONPATH": "/a:/b"})
    assert environment["PYTHONPATH"].split(os.pathsep) == [
        str(launch_server.AUTOINSTALL_DIR), "/a", "/b"]
    assert environment["MOESTAT_SGLANG_INSTALL"] == "1"
