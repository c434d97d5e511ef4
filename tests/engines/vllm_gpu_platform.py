"""vLLM's platform for moestat's GPU tests, where vLLM's compiled kernels may not load.

vLLM's CUDA platform imports its compiled kernels when it loads (``vllm._C_stable_libtorch``,
then ``_C`` ops its modules call at import). They are built for the torch vLLM 0.33.0 pins, so
on a GPU machine with another torch (the one this project is tested on) the CUDA platform does
not load. What the GPU tests need of vLLM does not need those kernels: its routers' top-k is
the same torch code on either platform, and its EPLB map-and-record kernel is Triton.

``select()`` picks vLLM's CUDA platform where it loads. Elsewhere it makes vLLM's CPU platform
current (tensors still live on the GPU) and, because base_router.py defines the Triton EPLB
kernel only when the platform is CUDA-alike at its import (on other platforms
``eplb_map_to_physical_and_record`` returns the ids unmapped and records nothing), it executes
base_router.py's own source once more under a CPU platform that reports itself CUDA-alike and
puts the ``eplb_map_to_physical_and_record`` so defined, vLLM's Triton kernel and its launcher,
into base_router in place of the CPU one (the kernel and the launcher under their own names, where
torch.compile's guards look them up). Nothing else of vLLM runs under that stand-in, and
the routers (``BaseRouter`` and its subclasses, imported once) are unchanged: they look the
function up in their module when they route. vLLM keeps one platform per process, so a test
module that calls ``select()`` runs in a pytest process of its own.
"""
import importlib.util
import os

BASE_ROUTER = "vllm.model_executor.layers.fused_moe.router.base_router"


def select() -> str:
    """'cuda' where vLLM's CUDA platform loads, else 'cpu' (vLLM's CPU platform, with vLLM's
    Triton EPLB kernel where Triton finds a GPU). Call before any other vLLM module reads the
    platform."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cuda")
    import vllm.platforms

    try:
        if vllm.platforms.current_platform.is_cuda():
            return "cuda"
    except ImportError:  # vLLM's compiled kernels, which its CUDA platform imports, are absent
        pass
    use_cpu_platform()
    _define_the_triton_eplb_kernel()
    return "cpu"


def use_cpu_platform():
    """vLLM's CPU platform, current from here on (before any vLLM module reads it)."""
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform

    vllm.platforms._current_platform = CpuPlatform()


def _define_the_triton_eplb_kernel():
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform
    from vllm.triton_utils import HAS_TRITON

    base_router = importlib.import_module(BASE_ROUTER)
    if not HAS_TRITON or hasattr(base_router, "_eplb_map_and_record_triton"):
        return

    class CudaAlikeCpuPlatform(CpuPlatform):
        def is_cuda_alike(self) -> bool:
            return True

    cpu_platform = vllm.platforms._current_platform
    spec = importlib.util.find_spec(BASE_ROUTER)
    namespace = {"__name__": BASE_ROUTER, "__file__": spec.origin}
    vllm.platforms._current_platform = CudaAlikeCpuPlatform()
    try:
        exec(compile(spec.loader.get_source(BASE_ROUTER), spec.origin, "exec"), namespace)
    finally:
        vllm.platforms._current_platform = cpu_platform
    # The CUDA branch's function and every name it defines that the CPU branch does not (the
    # Triton kernel, its launcher): torch.compile's guards look the launcher's globals up in
    # base_router itself.
    defined = ["eplb_map_to_physical_and_record"] + [
        name for name in namespace if not name.startswith("__") and not hasattr(base_router, name)]
    for name in defined:
        setattr(base_router, name, namespace[name])
