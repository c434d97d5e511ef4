"""Where a recording counts: the recorder made for (or checked against) the device a model
runs on, and the CUDA stream its work goes to."""

from typing import Optional

import torch

from .. import _core
from .._core import Error

# The recorders that read host memory; the others run kernels on a GPU.
_HOST_RECORDERS = ("CpuRecorder", "CpuRouteRecorder")


def device_of(module: torch.nn.Module) -> torch.device:
    """Where module runs: its first parameter's device, the CPU without parameters."""
    parameter = next(module.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def cuda_index(device) -> int:
    """The index of a CUDA device ("cuda": the current one)."""
    device = torch.device(device)
    return device.index if device.index is not None else torch.cuda.current_device()


def make_recorder(topology, device, *, routes: bool = False, **options):
    """The recorder for a model on device ("cpu", "cuda" or "cuda:N"): CpuRecorder or
    CudaRecorder (routes: CpuRouteRecorder or CudaRouteRecorder), made with options.
    Raises moestat.Error for another device, or a CUDA device where this moestat was built
    without the CUDA recorder."""
    device = torch.device(device)
    if device.type == "cpu":
        return (_core.CpuRouteRecorder if routes else _core.CpuRecorder)(topology, **options)
    if device.type != "cuda":
        raise Error(f"device {str(device)!r}: moestat records on cuda or cpu")
    if not _core.has_cuda:
        raise Error(f"device {str(device)!r}: this moestat was built without the CUDA recorder")
    index = cuda_index(device)
    if routes:
        with torch.cuda.device(index):  # the route recorder allocates on the current device
            return _core.CudaRouteRecorder(topology, **options)
    return _core.CudaRecorder(topology, device=index, **options)


def check_recorder_device(recorder, device, what: str) -> None:
    """Raises moestat.Error unless recorder counts where device is: a Cpu* recorder for the
    CPU (it reads host memory), a Cuda* one for a GPU. what: the model, for the message."""
    on_host = type(recorder).__name__ in _HOST_RECORDERS
    device = torch.device(device)
    if on_host != (device.type == "cpu"):
        kind = "Route" if isinstance(recorder, _core.RouteRecorder) else ""
        wanted = f"{'Cpu' if device.type == 'cpu' else 'Cuda'}{kind}Recorder"
        reads = "reads host memory" if on_host else "counts on a GPU"
        raise Error(f"{what} is on {device}: record it with moestat.{wanted} "
                    f"({type(recorder).__name__} {reads})")


class StreamFollower:
    """Sends a CUDA recorder's work to the stream current where it is called (an engine may run
    a layer on another stream: two-batch overlap; a graph capture runs on a side stream), and
    calls the recorder only when that stream changed. A host recorder has no stream: follow()
    does nothing for it."""

    __slots__ = ("_recorder", "_stream")

    def __init__(self, recorder):
        self._recorder = recorder if hasattr(recorder, "set_stream") else None
        self._stream: Optional[int] = None

    def follow(self, device=None) -> None:
        """device: the GPU whose current stream counts (default: the current one)."""
        if self._recorder is None:
            return
        stream = torch.cuda.current_stream(device).cuda_stream
        if stream != self._stream:
            self._recorder.set_stream(stream)
            self._stream = stream
