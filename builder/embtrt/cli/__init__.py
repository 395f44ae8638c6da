"""The `embtrt` command line (Typer), one module per stage. Each command builds its spec and calls
one function; an EmbtrtError becomes its exit code in one handler (app.Commands).

    build.py    build          export/: a model folder -> a repository
    engines.py  engines        TensorRT plans on the GPU host
    check.py    check          the repository check
    serve.py    serve, embed, probe, demo
    measure.py  verify, bench, matrix, tune
    scale.py    gateway, k8s
"""

from . import build, check, engines, serve, measure, scale  # noqa: F401  (registers the commands, in this order)
from .app import app, main

__all__ = ["app", "main"]
