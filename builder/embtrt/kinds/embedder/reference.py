"""The embedder's detection rule, the registry's last: every folder no other kind's rule claimed is an
embedder (a SentenceTransformer folder, or a transformers encoder pooled as the build is told)."""

from __future__ import annotations

from pathlib import Path

from ...common.files import json_object
from ...reference.detect import st_model_type


def embedder_rule(path: Path) -> tuple[bool, str]:
    """Detection (embtrt_backend.kinds.DETECTION): matches every folder; says what it is."""
    path = Path(path)
    if st_model_type(path) == "SentenceTransformer" or (path / "modules.json").is_file():
        return True, "a sentence-transformers SentenceTransformer folder"
    archs = [a for a in json_object(path / "config.json").get("architectures") or [] if isinstance(a, str)]
    return True, f"config.json names {', '.join(archs) or 'no architecture'} (an encoder)"
