"""The `embtrt` command line (Typer), one module per stage. Each command builds its spec and calls
one function; an EmbtrtError becomes its exit code in one handler (app.Commands).

    build.py    build          export/: a model folder -> a repository
    engines.py  engines        TensorRT plans on the GPU host
    check.py    check          the repository check
    serve.py    serve, embed, probe, demo
    measure.py  verify, bench, matrix, tune
    scale.py    gateway, k8s
    up.py       up             build (or reuse), serve and the gateway in one command
and each kind's own commands from its package (Kind.cli: `rerank`, `classify`, `sparse`, `encode`),
registered after the stages' in the registry's order.
"""

import importlib

from embtrt_backend.kinds import KINDS

from . import build, check, engines, serve, up, measure, scale  # noqa: F401  (registers the commands, in this order)
from .app import app, main

for _kind in KINDS:
    if _kind.cli:
        importlib.import_module(_kind.cli)

__all__ = ["app", "main"]
