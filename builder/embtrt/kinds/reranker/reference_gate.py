"""The reranker gate, one judgement for the build and for `embtrt verify`: served scores of real
query-passage pairs against CrossEncoder.predict per length bucket (max |difference|), and per
query the order of CrossEncoder.rank's top 10.

fp32: max |difference| at most 1e-4 and the top 10 in the same order for every query. Reduced
precision (OpenVINO bf16): max |difference| at most 0.01 and the top-10 overlap with
CrossEncoder.rank at least 0.98 on average over the queries, or the build refuses."""

from __future__ import annotations

from typing import Callable

import numpy as np

from .reference import ce_predict
from ...reference.ranking import Agreement, top_k
from ...reference.verdict import Verdict, per_bucket

SCORE_TOLERANCE = 1e-4   # fp32: max |served - CrossEncoder.predict| per bucket
TOP_K = 10               # per query, the order of CrossEncoder.rank's top 10 must be the same
REDUCED_TOLERANCE = 1e-2  # reduced precision: max |served - CrossEncoder.predict| per bucket
REDUCED_OVERLAP = 0.98    # reduced precision: mean top-10 overlap with CrossEncoder.rank


def tolerance_for(precision: str) -> float:
    return SCORE_TOLERANCE if precision == "fp32" else REDUCED_TOLERANCE


def judge(ce, queries: list[str], docs: list[list[str]], got: np.ndarray, tokens: np.ndarray,
          buckets: tuple[int, ...] | list[int], log: Callable[[str], None] = print,
          precision: str = "fp32") -> Verdict:
    """got: served scores [pairs, labels] of every (query, document) pair in order; tokens: each
    pair's token count as served (its bucket). -> the verdict (its lines logged)."""
    tolerance = tolerance_for(precision)
    pairs = [(q, d) for q, ds in zip(queries, docs) for d in ds]
    want = ce_predict(ce, pairs)
    if got.shape != want.shape:
        raise ValueError(f"served scores have shape {got.shape}, CrossEncoder.predict {want.shape}")
    diff = np.abs(got - want).max(axis=1)
    v = Verdict()
    buckets_seen = per_bucket(v, diff, tokens, buckets, tolerance, "pairs", "CrossEncoder.predict", "pairs")
    same: int | None = None
    if got.shape[1] != 1:   # CrossEncoder.rank takes one-label models only: the scores are the gate
        v.check(True, f"ranking: not judged ({got.shape[1]} labels: a classifier, CrossEncoder.rank takes "
                "one-label models); every label's score is gated above")
    else:
        theirs, ours, start = [], [], 0
        for q, ds in zip(queries, docs):
            n = len(ds)
            theirs.append([r["corpus_id"] for r in ce.rank(q, ds, top_k=min(TOP_K, n), batch_size=32,
                                                           show_progress_bar=False)])
            ours.append(top_k(got[start:start + n, 0], min(TOP_K, n)))
            start += n
        agree = Agreement.of(ours, theirs)
        same, overlap = agree.identical, agree.overlap
        ok = agree.passes(None if precision == "fp32" else REDUCED_OVERLAP)
        if precision == "fp32":
            v.check(ok, f"ranking: top {TOP_K} of CrossEncoder.rank identical for {same} of "
                    f"{len(queries)} queries ({len(pairs)} pairs)",
                    f"ranking: top {TOP_K} differs for {len(queries) - same} of {len(queries)} queries")
        else:
            v.check(ok, f"ranking ({precision}): top-{TOP_K} overlap with CrossEncoder.rank "
                    f"{overlap:.3f} (limit {REDUCED_OVERLAP}), order identical for {same} of {len(queries)} queries",
                    f"ranking: top-{TOP_K} overlap {overlap:.3f} < {REDUCED_OVERLAP} ({precision})")
    for line in v.lines:
        log(line)
    v.figures.update({"pairs": len(pairs), "queries": len(queries), "buckets": buckets_seen, "rank_identical": same,
                      "precision": precision, "tolerance": tolerance, "max_abs_diff": float(diff.max())})
    return v
