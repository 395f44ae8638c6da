"""The page-image retriever's gate (#70 item 4), one judgement for the build and the tests, fp32 (python-torch):

- counts: every query and every page the reference's number of vectors (exactly);
- vectors: every token vector's cosine with the reference's >= 0.9999 (queries and pages apart);
- MaxSim: every query against every page, |served - reference| <= 1e-4 (processor.score_retrieval's scores);
- retrieval: every query's pages in the reference's order, two trading places only where their reference scores
  are closer than twice the MaxSim bound (reference.ranking's rule).
The bounds are constants: none follows the error it judges."""

from __future__ import annotations

from typing import Callable

import numpy as np
from embtrt_backend.token_vectors import maxsim_matrix

from ...reference.ranking import agreement
from ...reference.verdict import Verdict

COSINE, SCORE, TOP_K = 0.9999, 1e-4, 10


def min_cosines(got: list[np.ndarray], want: list[np.ndarray]) -> tuple[float, int]:
    """The least token-vector cosine over items of equal counts, and the first item whose count differs (-1: none)."""
    bad = next((i for i, (g, w) in enumerate(zip(got, want)) if g.shape != w.shape), -1)
    low = 1.0
    for g, w in zip(got, want):
        if g.shape == w.shape and len(w):
            cos = (g * w).sum(axis=1) / np.maximum(np.linalg.norm(g, axis=1) * np.linalg.norm(w, axis=1), 1e-12)
            low = min(low, float(cos.min()))
    return low, bad


def judge(served: dict[str, list[np.ndarray]], reference: dict[str, list[np.ndarray]], ref_scores: np.ndarray,
          log: Callable[[str], None] = print) -> "Verdict":
    """served and reference: {"queries": vectors per query, "images": vectors per image}; ref_scores: the reference's
    [queries, pages] MaxSim (score_retrieval)."""
    v, figures = Verdict(), {}
    for name in ("queries", "images"):
        got, want = served[name], reference[name]
        low, bad = min_cosines(got, want)
        v.check(bad < 0 and len(got) == len(want), f"{name}: {len(want)} items, each with the reference's number of vectors",
                *([f"{name}: item {bad} has {len(got[bad])} vectors, the reference {len(want[bad])}"] if bad >= 0 else []))
        v.check(low >= COSINE, f"{name}: token-vector cosine min {low:.6f} (limit {COSINE})",
                f"{name}: token-vector cosine {low:.6f} < {COSINE}")
        figures[f"{name}_cosine_min"], figures[name] = low, len(want)
    ours = maxsim_matrix(served["queries"], served["images"])
    worst = float(np.abs(ours - ref_scores).max(initial=0.0))
    v.check(worst <= SCORE, f"MaxSim: {len(ours)} queries x {len(served['images'])} pages, max |score difference| vs "
            f"score_retrieval {worst:.1e} (limit {SCORE:.0e})", f"MaxSim scores differ by {worst:.2e} > {SCORE:.0e}")
    agree = agreement(list(ours), list(ref_scores), min(TOP_K, ours.shape[1]), 2 * SCORE)
    agree.check(v, "fp32", min(TOP_K, ours.shape[1]), f"retrieval by MaxSim, {len(ours)} queries", "retrieval")
    for line in v.lines:
        log(line)
    v.figures.update({**figures, "score_error": worst, "retrieval": agree.figures(), "precision": "fp32"})
    return v
