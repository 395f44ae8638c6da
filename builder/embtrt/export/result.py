"""What a build returns, for every kind of model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class BuildResult:
    repository: Path
    manifest: dict
    check_lines: list[str]
    parity_lines: list[str]
    pending: list[str]
