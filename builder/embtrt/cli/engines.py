"""`embtrt engines`: export/onnx2trt.py's plans, built or checked in place on the GPU host."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import EXTRA_PURPOSE, DependencyError
from .app import app, say


@app.command()
def engines(
    repo: Path = typer.Argument(..., help="Repository written by `embtrt build --target tensorrt`."),
    force: bool = typer.Option(False, help="Rebuild every plan, even those that match. Default off."),
    check_only: bool = typer.Option(False, "--check", help="Only report missing / stale / foreign plans; exit 1 if any. Default off."),
    allow_mismatch: bool = typer.Option(False, help="Keep plans that fail the quality gate against their ONNX. Default off."),
    corpus: Optional[Path] = typer.Option(None, help="Texts for the plan-vs-ONNX parity check. Default: the bundled sample."),
) -> None:
    """On the GPU host: build every missing, stale or foreign TensorRT plan in place (usable as an init container).
    Needs TensorRT, nvidia-ml-py and Polygraphy (pip install 'embtrt[tensorrt]'), not PyTorch."""
    from ..common.corpus import load_corpus
    from ..export.onnx2trt import build_engines, check_plans

    if check_only:
        states = check_plans(repo)
        if not states:
            say(f"nothing to check: {repo} has no TensorRT encoders (it was built for another target)")
        for st in states:
            say(f"[{st.state}] {st.message}")
        raise typer.Exit(1 if any(st.needs_build for st in states) else 0)
    # what building plans needs, all of it named when something is missing: TensorRT's real API (tensorrt-stubs
    # imports as an empty package), NVML for the GPU's name (nvidia-ml-py), Polygraphy and ONNX Runtime. Where
    # only TensorRT is missing, build_engines says so with what to run on the GPU host.
    import importlib.util

    from ..common.gpu import tensorrt_available

    others = [m for m in ("pynvml", "onnxruntime", "polygraphy") if importlib.util.find_spec(m) is None]
    if others:
        missing = ([] if tensorrt_available()[0] else ["tensorrt"]) + others
        raise DependencyError(f"`embtrt engines` needs {EXTRA_PURPOSE['tensorrt']}; not installed here: "
                              f"{', '.join('nvidia-ml-py (pynvml)' if m == 'pynvml' else m for m in missing)}",
                              "pip install 'embtrt[tensorrt]'")
    build_engines(repo, force=force, allow_mismatch=allow_mismatch, texts=load_corpus(corpus) if corpus else None, log=say)
