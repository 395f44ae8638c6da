"""Is there a GPU with TensorRT here? NVML names the GPU; no PyTorch or CUDA toolkit needed."""

from __future__ import annotations

from ..errors import DependencyError


def gpu_info() -> tuple[str, str]:
    """(name, compute capability) of GPU 0 from NVML; raises DependencyError with the reason."""
    try:
        import pynvml
    except ImportError:
        raise DependencyError("nvidia-ml-py (pynvml) is not installed to query the GPU",
                              "pip install 'embtrt[tensorrt]'") from None
    try:
        pynvml.nvmlInit()
        try:
            if pynvml.nvmlDeviceGetCount() < 1:
                raise DependencyError("NVML reports no GPU")
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            name = pynvml.nvmlDeviceGetName(h)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        raise DependencyError(f"no usable GPU: NVML says {exc}") from None
    return (name.decode() if isinstance(name, bytes) else str(name)), f"{major}.{minor}"


def tensorrt_available() -> tuple[bool, str]:
    """(True, "") when TensorRT imports and NVML sees a GPU, else (False, the reason).

    `tensorrt-stubs` installs a `tensorrt/` folder of type stubs only, which imports as an
    empty namespace package: we look for the real API, not just a successful import.
    """
    try:
        import tensorrt as trt
    except Exception as exc:  # ImportError, or OSError when libnvinfer is missing
        return False, f"TensorRT is not importable ({type(exc).__name__}: {exc})"
    if not hasattr(trt, "Builder"):
        return False, "TensorRT is not importable (only type stubs are installed: no tensorrt.Builder)"
    try:
        gpu_info()
    except DependencyError as exc:
        return False, exc.message
    return True, ""
