"""How far a served ranking agrees with its reference, per query: one rule for every kind's retrieval or
ranking check (the reranker, sparse, multi-vector and text-and-image gates, and `verify --against`),
from seed 003's gate:

- fp32: every query's served top k is a top-k ranking of the reference's scores up to a constant tie: two
  items may trade places only where their reference scores are closer than `tie`, which each kind derives
  from its own fp32 score bound (twice it: two scores each within the bound can cross only inside that
  gap), never from the error it measured;
- reduced precision: mean top-k overlap >= 0.98 and NDCG@k regression <= 0.005 against the reference.

`identical` counts queries whose served top k is the reference's exactly, in order (a figure, not the
fp32 verdict: a true near-tie may swap)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

MIN_OVERLAP = 0.98            # reduced precision: mean top-k overlap
MAX_NDCG_REGRESSION = 0.005   # reduced precision: 1 - mean NDCG@k of the served order


@dataclass(frozen=True)
class Agreement:
    queries: int
    identical: int       # served top k equal to the reference's, in order
    within_ties: int     # served top k a top-k ranking of the reference's scores up to the tie
    overlap: float       # mean |served & reference| / |reference| (1.0 with no queries)
    ndcg: float          # mean NDCG@k of the served order, the reference's top k as graded relevance
    nonfinite: int = 0   # queries with a NaN or inf served score: fail at any precision

    @property
    def ndcg_regression(self) -> float:
        return 1.0 - self.ndcg

    def passes(self, precision: str) -> bool:
        if self.nonfinite:
            return False
        if precision == "fp32":
            return self.within_ties == self.queries
        return self.overlap >= MIN_OVERLAP and self.ndcg_regression <= MAX_NDCG_REGRESSION

    def describe(self, precision: str, k: int) -> str:
        """The check's line: what it found against what it allows."""
        if precision == "fp32":
            return (f"top {k} a ranking of the reference's scores up to the tie for {self.within_ties} of "
                    f"{self.queries} queries, identical for {self.identical}")
        return (f"top-{k} overlap {self.overlap:.3f} (limit {MIN_OVERLAP}), NDCG@{k} regression "
                f"{self.ndcg_regression:.4f} (limit {MAX_NDCG_REGRESSION}), identical for {self.identical} of "
                f"{self.queries} queries ({precision})")

    def failure(self, precision: str, k: int) -> list[str]:
        bad = [f"{self.nonfinite} of {self.queries} queries have a NaN or inf score"] if self.nonfinite else []
        if precision == "fp32":
            return bad + [f"top {k} differs beyond the tie for {self.queries - self.within_ties} of {self.queries} queries"]
        out = bad
        if not self.overlap >= MIN_OVERLAP:
            out.append(f"top-{k} overlap {self.overlap:.3f} < {MIN_OVERLAP}")
        if not self.ndcg_regression <= MAX_NDCG_REGRESSION:
            out.append(f"NDCG@{k} regression {self.ndcg_regression:.4f} > {MAX_NDCG_REGRESSION}")
        return out

    def check(self, v, precision: str, k: int, what: str, label: str) -> bool:
        """This agreement as one check of verdict `v`: its line is `what: ` and the figures, each failure
        `label: ` and what failed."""
        return v.check(self.passes(precision), f"{what}: " + self.describe(precision, k),
                       *(f"{label}: {f}" for f in self.failure(precision, k)))

    def figures(self) -> dict:
        return {"identical": self.identical, "within_ties": self.within_ties, "queries": self.queries,
                "overlap": self.overlap, "ndcg_regression": self.ndcg_regression}


def top_k(scores: np.ndarray, k: int) -> list[int]:
    """The indices of the k largest scores, ties in index order."""
    return [int(i) for i in np.argsort(-np.asarray(scores, np.float64), kind="stable")[:k]]


def ranks_within(order: Sequence[int], want: np.ndarray, k: int, tie: float) -> bool:
    """Is `order` (a served top k, best first) a top-k ranking of the reference's scores `want` up to ties closer
    than `tie`: every item at least every later one and every item left out, each less `tie`?"""
    want = np.asarray(want, np.float64)
    order = [int(i) for i in order]
    if len(order) != min(k, len(want)) or len(set(order)) != len(order):
        return False
    vals = want[order]
    if not np.all(np.isfinite(vals)):
        return False
    rest = np.delete(want, order)
    if rest.size and vals.min() < rest.max() - tie:   # a better item left out
        return False
    later = np.maximum.accumulate(vals[::-1])[::-1][1:]   # the best of each item's followers
    return bool(np.all(vals[:-1] >= later - tie))


def ndcg(order: Sequence[int], reference: Sequence[int]) -> float:
    """NDCG of a served top k, graded by the reference's top k (its first item k, its last 1, others 0)."""
    k = len(reference)
    if not k:
        return 1.0
    gain = {int(item): k - r for r, item in enumerate(reference)}
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    got = np.array([gain.get(int(item), 0) for item in list(order)[:k]] + [0] * max(0, k - len(order)), np.float64)
    return float(np.dot(got, disc) / np.dot(np.arange(k, 0, -1, dtype=np.float64), disc))


def agreement(served: Sequence[np.ndarray], reference: Sequence[np.ndarray], k: int,
              tie: float | Sequence[float]) -> Agreement:
    """Served against reference scores, one row per query (rows may differ in length between queries, never
    between the two sides); `tie` one constant or one per query."""
    if len(served) != len(reference):
        raise ValueError(f"{len(served)} served rankings against {len(reference)} reference rankings")
    ties = [float(tie)] * len(reference) if np.ndim(tie) == 0 else [float(t) for t in tie]   # type: ignore[arg-type,union-attr]
    same = within = broken = 0
    laps, gains = [], []
    for got, want, t in zip(served, reference, ties, strict=True):
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        if got.shape != want.shape:
            raise ValueError(f"a served row of {got.shape} scores against {want.shape} in the reference")
        n = min(k, len(want))
        ours, theirs = top_k(got, n), top_k(want, n)
        if not np.all(np.isfinite(got)):   # a NaN or inf served: the query fails every figure, and the verdict
            broken += 1
            laps.append(0.0)
            gains.append(0.0)
            continue
        same += ours == theirs
        within += ranks_within(ours, want, n, t)
        laps.append(len(set(ours) & set(theirs)) / n if n else 1.0)
        gains.append(ndcg(ours, theirs))
    q = len(reference)
    return Agreement(q, same, within, float(np.mean(laps)) if q else 1.0, float(np.mean(gains)) if q else 1.0, broken)
