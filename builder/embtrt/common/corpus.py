"""Real texts: the bundled sample or a user's file (JSON list, or one text per line)."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import SpecError
from .resources import data_file


def load_corpus(path: Path | None = None) -> list[str]:
    """A JSON list of strings, or one text per line. Default: the bundled real-text sample."""
    path = Path(path) if path else data_file("corpus.txt")
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"invalid corpus: cannot read {path}: {exc}", "pass a readable text or JSON file") from exc
    if raw.lstrip().startswith("["):
        try:
            texts = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SpecError(f"invalid corpus: {path} is not valid JSON: {exc}", "a JSON list of strings") from exc
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise SpecError(f"invalid corpus: {path} must be a JSON list of strings")
    else:
        texts = [line for line in raw.splitlines() if line.strip()]
    if len(texts) < 2:
        raise SpecError(f"invalid corpus: {path} holds {len(texts)} texts", "at least 2 texts are needed")
    return texts
