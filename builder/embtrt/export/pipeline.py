"""`embtrt build`: the model's kind builds the repository (`Kind.build`: export, gate, render,
check, manifest; the embedder's is embtrt.kinds.embedder.export) in a work folder next to the
destination, moved into place only after every check passed: a failed build leaves nothing
half-written.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from embtrt_backend.kinds import kind_of

from ..common.corpus import load_corpus
from ..common.files import check_out
from ..common.log import Log
from ..common.plugins import implementation
from ..errors import DependencyError
from ..reference.detect import detect
from .result import BuildResult
from .spec import BuildSpec


def require_device(spec: BuildSpec) -> None:
    """A python-torch build for CUDA runs its gate on the GPU it will be served on: refused at once
    on a machine where PyTorch sees none."""
    if spec.target != "python-torch" or spec.device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise DependencyError(f"--device cuda: PyTorch sees no CUDA device on this machine (torch {torch.__version__}, "
                              f"CUDA build {torch.version.cuda or 'none: a CPU-only PyTorch'})",
                              "build on the GPU host that will serve the repository (its gate runs the model there, "
                              "CUDA graphs included), or use --device cpu")


def kind_line(spec: BuildSpec) -> str:
    """What the build log says of the kind: the detection rule that decided it, or --kind's choice beside it."""
    found = detect(spec.model_dir)
    if found.kind.name == spec.kind:
        return found.explain()
    return f"{spec.kind}, as --kind says (the folder alone: {found.explain()})"


def build(spec: BuildSpec, *, force: bool = False, corpus: Path | None = None, log: Log = print) -> BuildResult:
    t0 = time.time()
    out = spec.out.resolve()
    check_out(out, force)
    require_device(spec)
    out.parent.mkdir(parents=True, exist_ok=True)
    texts = load_corpus(corpus)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.embtrt-", dir=out.parent))
    log(f"kind: {kind_line(spec)}")
    try:
        result = implementation(kind_of(spec.kind), "build")(spec, tmp, texts, log)
        if out.exists():
            old = out.with_name(f".{out.name}.old-{int(time.time())}")
            out.rename(old)
            (tmp / "repo").rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            (tmp / "repo").rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result.repository = out
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    result.manifest["build_peak_rss_mib"] = round(peak)
    log(f"repository written to {out} in {time.time() - t0:.1f} s (peak memory of the build process: {peak:.0f} MiB)")
    return result


__all__ = ["build", "BuildResult"]
