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


def bucket_rows(tokens, buckets) -> list:
    """[(bucket, mask of its rows)] for every length bucket holding a row, in bucket order: a row's bucket is the
    smallest holding its `tokens` (the longest for a row over every bucket). The gates report per bucket with it."""
    import numpy as np

    b = np.asarray(buckets)
    bucket = b[np.minimum(np.searchsorted(b, tokens), len(b) - 1)]
    return [(int(edge), bucket == edge) for edge in b if (bucket == edge).any()]


def per_bucket(v: Verdict, diff, tokens, buckets, tolerance: float, noun: str, against: str,
               count_key: str = "rows") -> dict:
    """One marked line per length bucket of the rows' max |difference| (`diff`, one value per row; a row's
    bucket is the smallest holding its `tokens`), at most `tolerance` or the bucket fails: "bucket 32: 29
    pairs, max |score - CrossEncoder.predict| 3.0e-07 (limit 1e-04)". -> {bucket: {count_key, max_abs_diff}}."""
    out = {}
    for edge, sel in bucket_rows(tokens, buckets):
        worst = float(diff[sel].max())
        out[str(edge)] = {count_key: int(sel.sum()), "max_abs_diff": worst}
        v.check(worst <= tolerance, f"bucket {edge}: {int(sel.sum())} {noun}, max |score - {against}| {worst:.1e} "
                f"(limit {tolerance:.0e})", f"bucket {edge}: max |score difference| {worst:.2e} > {tolerance:.0e}")
    return out
