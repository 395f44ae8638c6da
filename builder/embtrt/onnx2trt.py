"""ONNX -> TensorRT engine per length bucket (GPU host only)."""

from __future__ import annotations


def tensorrt_available() -> tuple[bool, str]:
    """(True, "") when TensorRT imports and a CUDA device exists, else (False, the reason)."""
    try:
        import tensorrt  # noqa: F401
    except Exception as exc:  # ImportError, or OSError when libnvinfer is missing
        return False, f"TensorRT is not importable ({type(exc).__name__}: {exc})"
    try:
        import torch

        if not torch.cuda.is_available():
            return False, "no CUDA device is visible"
    except ImportError:
        return False, "torch is not importable to query CUDA"
    return True, ""


def prepare_engines(spec, onnx_path, workdir, log=print):
    """Build plans where TensorRT and CUDA exist; otherwise report them as pending."""
    from .errors import DependencyError

    ok, why = tensorrt_available()
    if ok:
        raise DependencyError("building TensorRT engines in-process is not implemented yet",
                              "build with --target python-ort")
    log(f"TensorRT engines not built here: {why}. Run `embtrt engines REPO` on the GPU host.")
    return {}, {"built": False, "reason": why}, [f"{spec.name}_{b}_encoder/1/model.plan" for b in spec.buckets]


def write_recipes(spec, onnx_path, repo, log=print):
    """Placeholder until the TensorRT target lands: copies the ONNX next to each encoder."""
    import shutil

    for b in spec.buckets:
        d = repo / f"{spec.name}_{b}_encoder"
        shutil.copy2(onnx_path, d / "model.onnx")
