"""A CudaRecorder made where CUDA has no driver or no GPU says so in words and points to
CpuRecorder (issue 17), instead of "cudaGetDevice(&device) failed: cudaErrorInsufficientDriver".
Needs no torch; skipped without the CUDA recorder in the build and where a GPU is present
(there, test_cuda.py runs, and a device past the last GPU is checked here)."""
import pytest

import moestat

pytestmark = pytest.mark.skipif(not moestat.has_cuda, reason="a build without the CUDA recorder")

TOPOLOGY = moestat.ModelTopology.uniform(num_layers=2, num_experts=8, top_k=2)


def construction_error(**options):
    """The message of the moestat.Error CudaRecorder(TOPOLOGY, **options) raises; skips the
    test where the recorder is made (a GPU is present)."""
    try:
        moestat.CudaRecorder(TOPOLOGY, **options)
    except moestat.Error as error:
        return str(error)
    pytest.skip("this machine has a usable CUDA GPU")


@pytest.mark.parametrize("device", [-1, 0, 3])
def test_no_driver_or_gpu_is_said_in_words(device):
    message = construction_error(device=device)
    assert message.startswith("CudaRecorder: no usable CUDA driver or GPU on this machine (cudaError"), message
    assert message.endswith("; record with CpuRecorder, or run where a GPU is"), message
    assert "failed:" not in message and "cudaGetDevice" not in message, message


def test_every_mode_says_the_same():
    for mode in ("stat", "per_pass", "decayed"):
        assert construction_error(mode=mode).startswith("CudaRecorder: no usable CUDA driver")


def test_a_device_past_the_last_gpu_is_named():
    """Where a GPU is present: the device that does not exist, and how many there are."""
    try:
        moestat.CudaRecorder(TOPOLOGY)
    except moestat.Error:
        pytest.skip("no usable CUDA GPU here")
    with pytest.raises(moestat.Error, match=r"^CudaRecorder: device 1000 does not exist; this "
                                            r"machine has (1 CUDA GPU \(device 0\)|\d+ CUDA GPUs "
                                            r"\(devices 0 to \d+\))$"):
        moestat.CudaRecorder(TOPOLOGY, device=1000)
