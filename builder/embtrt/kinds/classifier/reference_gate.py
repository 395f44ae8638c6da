"""The classifier gate, one judgement for the build and for `embtrt verify`: served scores of real
texts and text pairs against transformers' model in process (reference.py), per length bucket
(max |difference|), and the top label of every row.

fp32: max |difference| at most 1e-4 per bucket and the top label identical on every row. Reduced
precision (OpenVINO bf16): at most 0.01, and the top label identical on at least 98% of the rows."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ...reference.verdict import Verdict, per_bucket
from ...reference.pairs import score_difference

SCORE_TOLERANCE = 1e-4
REDUCED_TOLERANCE = 1e-2
REDUCED_AGREEMENT = 0.98


def tolerance_for(precision: str) -> float:
    return SCORE_TOLERANCE if precision == "fp32" else REDUCED_TOLERANCE


def plan_check(m, got: np.ndarray, want: np.ndarray, masks, gate) -> tuple[float, bool, str]:
    """A classifier's TensorRT plan against its gated graph (export.onnx2trt): each label's score after the
    pipeline's activation and its logit, as this gate judges both, under its bound (fp32 1e-4, reduced 1e-2)."""
    d = max(score_difference(got, want, m.activation), float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()))
    limit = tolerance_for(m.precision)
    return d, d <= limit, f"{len(got)} texts: max |score or logit difference| {d:.2e} (limit {limit:.0e})"


def judge(got: np.ndarray, want: np.ndarray, tokens: np.ndarray, buckets, log: Callable[[str], None] = print,
          precision: str = "fp32", what: str = "rows", labels: int | None = None) -> Verdict:
    """got / want: scores [rows, columns] (served, reference; the build's: each label's score, then its logit),
    tokens: each row's token count as served; `labels`: the columns holding the scores (default all), whose
    top one must agree."""
    if got.shape != want.shape:
        raise ValueError(f"served scores have shape {got.shape}, the reference {want.shape}")
    tolerance = tolerance_for(precision)
    diff = np.abs(got - want).max(axis=1)
    v = Verdict()
    buckets_seen = per_bucket(v, diff, tokens, buckets, tolerance, what, "transformers")
    n = labels or got.shape[1]
    same = float((got[:, :n].argmax(axis=1) == want[:, :n].argmax(axis=1)).mean()) if n > 1 else 1.0
    need = 1.0 if precision == "fp32" else REDUCED_AGREEMENT
    v.check(same >= need, f"top label identical on {same:.1%} of {len(got)} {what} (limit {need:.0%})",
            f"top label differs on {1 - same:.1%} of the {what}")
    for line in v.lines:
        log(line)
    v.figures.update({"rows": int(len(got)), "buckets": buckets_seen, "label_agreement": same, "precision": precision,
                      "tolerance": tolerance, "max_abs_diff": float(diff.max())})
    return v
