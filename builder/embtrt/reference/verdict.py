"""One verdict type for every gate and `verify` (#50 item 4): the lines a person reads, one per
check (`[ok] ...` / `[x] ...`), the failures that decide it (one or more per failed check) and
the figures a machine reads.

The gates of each kind (reference.parity's cosine gate, the kinds' reference_gate), the build that
refuses on them and `embtrt verify` of every kind speak it, so that a new kind's gate is a function
returning a Verdict and nothing downstream changes.
"""

from __future__ import annotations

from typing import Any


class Verdict:
    """`lines` (each check's, marked), `failures` (those that decide it), `figures`; `passed`."""

    def __init__(self, figures: dict[str, Any] | None = None) -> None:
        self.lines: list[str] = []
        self.failures: list[str] = []
        self.figures: dict[str, Any] = dict(figures or {})

    def check(self, ok: bool, line: str, *failures: str) -> bool:
        """One check: its line, marked; where it failed, its failures (the line itself if none given)."""
        self.lines.append(f"[{'ok' if ok else 'x'}] {line}")
        if not ok:
            self.failures.extend(failures or (line,))
        return ok

    def add(self, other: "Verdict", key: str | None = None) -> "Verdict":
        """Another verdict's lines and failures after these; its figures under `key` (or merged)."""
        self.lines += other.lines
        self.failures += other.failures
        if key is None:
            self.figures.update(other.figures)
        else:
            self.figures[key] = other.as_dict(lines=False)
        return self

    @property
    def passed(self) -> bool:
        return not self.failures

    def as_dict(self, lines: bool = True) -> dict[str, Any]:
        """The figures with `passed` and `failures` (and `lines`): what --json and the manifest keep."""
        out = {**self.figures, "passed": self.passed, "failures": list(self.failures)}
        if lines:
            out["lines"] = list(self.lines)
        return out
