"""The serving-side logic (python_backend/embtrt_backend), importable by the builder, the
gateway and the benchmarks: the same tokenizer, routing and pooling code the models run."""

from __future__ import annotations

import sys

from .resources import python_backend_dir


def backend_lib():
    """Return the (text, encoder) modules of embtrt_backend, putting python_backend/ on sys.path."""
    p = str(python_backend_dir())
    if p not in sys.path:
        sys.path.insert(0, p)
    import embtrt_backend.encoder as encoder
    import embtrt_backend.text as text

    return text, encoder
