"""Writing a render: a clean folder every time, and never a folder that is not a previous render."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from ...errors import SpecError

MARKER = ".embtrt-k8s.json"  # the files a render wrote; only those are ever removed


def _previous(out: Path) -> list[str] | None:
    """The file names of the previous render in `out`; None when `out` is absent or empty. Refuses a
    folder holding anything a render did not write."""
    if not out.exists():
        return None
    if not out.is_dir():
        raise SpecError(f"invalid --out {out}: not a folder", "pass a new folder or a previous `embtrt k8s` output")
    entries = sorted(p.name for p in out.iterdir())
    if not entries:
        return None
    marker = out / MARKER
    if not marker.is_file():
        raise SpecError(f"invalid --out {out}: it holds files that `embtrt k8s` did not write "
                        f"({', '.join(entries[:5])}{', ...' if len(entries) > 5 else ''}); nothing was changed",
                        "pass a new or empty folder, or the folder of a previous `embtrt k8s` run")
    try:
        names = json.loads(marker.read_text(encoding="utf-8"))["files"]
    except (ValueError, KeyError, TypeError):
        raise SpecError(f"invalid --out {out}: {MARKER} is not a render's record; nothing was changed",
                        "pass a new or empty folder") from None
    foreign = [e for e in entries if e != MARKER and e not in names]
    if foreign or any("/" in n or n.startswith(".") for n in names):
        raise SpecError(f"invalid --out {out}: besides a previous render it holds {', '.join(foreign)}; nothing was changed",
                        "move those files away, or pass a new folder")
    return [n for n in names if (out / n).is_file()]


def previous_secrets(out: Path) -> dict[str, dict[str, str]]:
    """{Secret name: stringData} from a previous render in `out` (so that re-rendering keeps the keys)."""
    names = _previous(Path(out)) or []
    kept: dict[str, dict[str, str]] = {}
    for n in names:
        for doc in yaml.safe_load_all((Path(out) / n).read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") == "Secret" and isinstance(doc.get("stringData"), dict):
                kept[doc["metadata"]["name"]] = {str(k): str(v) for k, v in doc["stringData"].items()}
    return kept


def write_clean(out: Path, files: dict[str, list[dict]], secret_files: set[str]) -> list[Path]:
    """Remove the previous render's files, write these (secret files mode 0600) and the record."""
    out = Path(out)
    old = _previous(out) or []
    out.mkdir(parents=True, exist_ok=True)
    for n in old:
        (out / n).unlink()
    written = []
    for fname, docs in files.items():
        p = out / fname
        text = yaml.safe_dump_all(docs, sort_keys=False)
        if fname in secret_files:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
        else:
            p.write_text(text, encoding="utf-8")
        written.append(p)
    (out / MARKER).write_text(json.dumps({"files": sorted(files)}, indent=2) + "\n", encoding="utf-8")
    return written
