"""`embtrt engines`: export/onnx2trt.py's plans, built or checked in place on the GPU host."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import require_extra
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
        for st in states:
            say(f"[{st.state}] {st.message}")
        raise typer.Exit(1 if any(st.needs_build for st in states) else 0)
    require_extra("tensorrt", "engines", "onnxruntime", "polygraphy")
    build_engines(repo, force=force, allow_mismatch=allow_mismatch, texts=load_corpus(corpus) if corpus else None, log=say)
