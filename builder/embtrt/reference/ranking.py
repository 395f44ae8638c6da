"""How far two rankings agree, per query: the top-k lists identical, and their overlap. One
judgement for the reranker gate, the sparse gate's retrieval check and `verify --against`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Agreement:
    identical: int       # queries whose top-k lists are the same, in order
    queries: int
    overlap: float       # mean |ours & theirs| / |theirs| over the queries (1.0 with none)

    @classmethod
    def of(cls, ours: Sequence[Sequence[int]], theirs: Sequence[Sequence[int]]) -> "Agreement":
        same = sum(int(list(a) == list(b)) for a, b in zip(ours, theirs))
        laps = [len(set(map(int, a)) & set(map(int, b))) / max(1, len(b)) for a, b in zip(ours, theirs)]
        return cls(same, len(theirs), float(np.mean(laps)) if laps else 1.0)

    def passes(self, min_overlap: float | None) -> bool:
        """None: every list identical (fp32); else a mean overlap of at least min_overlap."""
        return self.identical == self.queries if min_overlap is None else self.overlap >= min_overlap


def top_k(scores: np.ndarray, k: int) -> list[int]:
    """The indices of the k largest scores, ties in index order."""
    return [int(i) for i in np.argsort(-np.asarray(scores), kind="stable")[:k]]
