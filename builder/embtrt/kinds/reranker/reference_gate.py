"""The reranker gate, one judgement for the build and for `embtrt verify`: served scores of real
query-passage pairs against CrossEncoder.predict per length bucket (max |difference|), and per
query the order of CrossEncoder.rank's top 10.

fp32: max |difference| at most 1e-4 and for every query the top 10 in CrossEncoder.rank's order, two
pairs trading places only where their reference scores are closer than 2e-4 (twice the score bound:
reference.ranking's rule). Reduced precision (OpenVINO bf16): max |difference| at most 0.01, a mean
top-10 overlap with CrossEncoder.rank of at least 0.98 and an NDCG@10 regression of at most 0.005, or
the build refuses."""

from __future__ import annotations

from typing import Callable

import numpy as np

from .reference import ce_predict
from ...reference.ranking import agreement
from ...reference.verdict import Verdict, per_bucket
from ...reference.pairs import score_difference

SCORE_TOLERANCE = 1e-4   # fp32: max |served - CrossEncoder.predict| per bucket
TOP_K = 10               # per query, the order of CrossEncoder.rank's top 10 must be the same
REDUCED_TOLERANCE = 1e-2  # reduced precision: max |served - CrossEncoder.predict| per bucket
RANK_TIE = 2 * SCORE_TOLERANCE   # fp32: two pairs may swap only where their reference scores are this close


def tolerance_for(precision: str) -> float:
    return SCORE_TOLERANCE if precision == "fp32" else REDUCED_TOLERANCE


def plan_check(m, got: np.ndarray, want: np.ndarray, masks, gate) -> tuple[float, bool, str]:
    """A reranker's TensorRT plan against its gated graph (export.onnx2trt): the scores after the model's
    activation (logits for identity), under this gate's bound for the precision (fp32 1e-4, reduced 1e-2)."""
    d = score_difference(got, want, m.activation)
    limit = tolerance_for(m.precision)
    return d, d <= limit, f"{len(got)} texts: max |score difference| {d:.2e} (limit {limit:.0e})"


def per_query(scores: np.ndarray, docs: list[list[str]]) -> list[np.ndarray]:
    """A one-label model's scores of every (query, document) pair in order -> one row per query."""
    bounds = np.cumsum([0] + [len(ds) for ds in docs])
    return [scores[a:b, 0] for a, b in zip(bounds, bounds[1:])]


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
    rank: dict | None = None
    if got.shape[1] != 1:   # CrossEncoder.rank takes one-label models only: the scores are the gate
        v.check(True, f"ranking: not judged ({got.shape[1]} labels: a classifier, CrossEncoder.rank takes "
                "one-label models); every label's score is gated above")
    else:
        agree = agreement(per_query(got, docs), per_query(want, docs), TOP_K, RANK_TIE)
        agree.check(v, precision, TOP_K, f"ranking against CrossEncoder.rank's order ({len(pairs)} pairs)", "ranking")
        rank = agree.figures()
    for line in v.lines:
        log(line)
    v.figures.update({"pairs": len(pairs), "queries": len(queries), "buckets": buckets_seen, "ranking": rank,
                      "precision": precision, "tolerance": tolerance, "max_abs_diff": float(diff.max())})
    return v
