"""Find the Jinja2 templates and python_backend/ both in a checkout and in an installed wheel."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parents[1]  # the embtrt package


def _find(name: str) -> Path:
    for candidate in (_PKG / name, _PKG.parent.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"embtrt resource folder {name!r} not found next to {_PKG}")


def templates_dir() -> Path:
    return _find("model_repository_templates")


def python_backend_dir() -> Path:
    return _find("python_backend")


def data_file(name: str) -> Path:
    return _PKG / "data" / name
