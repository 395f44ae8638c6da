"""File helpers shared by the build (repositories, recipes, bundles) and the GPU host."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link src to dst (same filesystem), else copy it; parent folders are created."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
