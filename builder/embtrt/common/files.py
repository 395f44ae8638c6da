"""File helpers shared by the build (repositories, recipes, bundles) and the GPU host."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from ..errors import SpecError


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


def check_out(out: Path, force: bool) -> None:
    """The repository folder may be written: not a file, and empty unless --force replaces it."""
    out = Path(out)
    if out.is_file() or (out.exists() and not out.is_dir()):
        raise SpecError(f"invalid out: {out} is a file", "pass a folder for the repository")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise SpecError(f"invalid out: {out} exists and is not empty", "pass --force to replace it")


def json_object(path: Path) -> dict:
    """The JSON object in `path`; {} where the file is missing, unreadable, not JSON or not an object
    (what a rule reading an optional file of a model folder wants)."""
    import json

    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}
