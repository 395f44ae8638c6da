"""The sparse gate, one judgement for the build and for `embtrt verify`: served weights of real
texts against SparseEncoder.encode_document and .encode_query, and for 16 queries the documents
they retrieve by dot product.

Per length bucket and side (document, query):
- values: fp32 max |weight difference| at most 1e-4; reduced precision (bf16, fp16) at most 2% of
  the text's largest reference weight;
- active dimensions: every dimension above a threshold on one side (1% of the text's largest
  reference weight in fp32, 5% in reduced precision) is active (non-zero) on the other.
Over 16 queries (half the texts, for fewer than 32) x the other texts as documents:
- dot products: per query, max |difference| at most 1e-4 (fp32) / 1e-2 (reduced) of its largest
  reference dot product;
- retrieval (reference.ranking's rule): every query's top 10 documents in the reference's order (fp32),
  two trading places only where their reference dot products are closer than twice the dot-product
  bound; reduced, a mean top-10 overlap of at least 0.98 and an NDCG@10 regression of at most 0.005.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...reference.ranking import agreement
from .reference import se_encode
from ...reference.verdict import Verdict, bucket_rows

TOLERANCE = 1e-4   # fp32: max |served weight - SparseEncoder weight| per bucket
TOP_K = 10
QUERIES = 16


@dataclass(frozen=True)
class Limits:
    weight: float          # fp32: absolute; reduced: relative to the text's largest weight
    weight_relative: bool
    active: float          # the active-dimension threshold, relative to the text's largest weight
    dot: float             # relative to the query's largest reference dot product


FP32 = Limits(TOLERANCE, False, 0.01, 1e-4)
REDUCED = Limits(0.02, True, 0.05, 1e-2)


def limits_for(precision: str) -> Limits:
    return FP32 if precision == "fp32" else REDUCED


def plan_check(m, got: np.ndarray, want: np.ndarray, masks, gate) -> tuple[float, bool, str]:
    """A sparse encoder's TensorRT plan against its gated graph (export.onnx2trt): the weights, fp32 1e-4
    absolute, reduced 2% of each text's largest weight."""
    d, limit = weight_error(got, want, m.precision), limits_for(m.precision).weight
    unit = "" if m.precision == "fp32" else " (of the text's largest)"
    return d, d <= limit, f"{len(got)} texts: max |weight{unit} difference| {d:.2e} (limit {limit:.0e})"


def _values(got: np.ndarray, want: np.ndarray, lim: Limits) -> np.ndarray:
    """Per text: the weight error, absolute (fp32) or relative to its largest reference weight."""
    diff = np.abs(got - want).max(axis=1)
    if lim.weight_relative:
        diff = diff / np.maximum(want.max(axis=1), 1e-12)
    return diff


def weight_error(got: np.ndarray, want: np.ndarray, precision: str) -> float:
    """The worst weight difference of any text in the gate's unit for the precision (fp32: absolute;
    reduced: of the text's largest weight), beside limits_for(precision).weight: for comparing a
    deployment with itself under load, with another, or a TensorRT plan with its gated graph."""
    return float(_values(np.asarray(got), np.asarray(want), limits_for(precision)).max(initial=0.0))


def _inactive(got: np.ndarray, want: np.ndarray, lim: Limits) -> np.ndarray:
    """Per text: dimensions above the threshold on one side that are zero on the other."""
    t = (lim.active * want.max(axis=1))[:, None]
    return ((want > t) & (got <= 0)).sum(axis=1) + ((got > t) & (want <= 0)).sum(axis=1)


def judge(se, texts: list[str], served: dict[str, tuple[np.ndarray, np.ndarray]], buckets: tuple[int, ...] | list[int],
          log: Callable[[str], None] = print, precision: str = "fp32") -> Verdict:
    """served: {"document": (weights [texts, vocab], tokens), "query": (...)} of every text in order."""
    lim = limits_for(precision)
    unit = "" if not lim.weight_relative else " of the text's largest"
    v, per = Verdict(), {}
    ref = {}
    for which in ("document", "query"):
        want = se_encode(se, texts, which)
        ref[which] = want
        got, tokens = served[which]
        diff, missing = _values(got, want, lim), _inactive(got, want, lim)
        for edge, sel in bucket_rows(tokens, buckets):
            worst, lost = float(diff[sel].max()), int(missing[sel].sum())
            nnz_w, nnz_g = int((want[sel] > 0).sum()), int((got[sel] > 0).sum())
            per[f"{which}/{edge}"] = {"texts": int(sel.sum()), "max_abs_diff": float(np.abs(got[sel] - want[sel]).max()),
                                           "weight_error": worst, "active": [nnz_w, nnz_g], "active_mismatch": lost}
            v.check(worst <= lim.weight and lost == 0,
                    f"{which} bucket {edge}: {int(sel.sum())} texts, max |weight - "
                    f"SparseEncoder.encode_{which}| {worst:.1e}{unit} (limit {lim.weight:.0e}); active dimensions "
                    f"{nnz_g} served, {nnz_w} reference, {lost} above {lim.active:.0%} of the largest weight "
                    "active on one side only",
                    *([f"{which} bucket {edge}: max |weight difference| {worst:.2e}{unit} > {lim.weight:.0e}"]
                      if worst > lim.weight else []),
                    *([f"{which} bucket {edge}: {lost} dimensions above the threshold active on one side only"]
                      if lost else []))
    nq = min(QUERIES, len(texts) // 2)   # a small corpus: half its texts as queries, the rest documents
    q, d = served["query"][0][:nq], served["document"][0][nq:]
    rq, rd = ref["query"][:nq], ref["document"][nq:]
    ours, theirs = q @ d.T, rq @ rd.T
    dot = float((np.abs(ours - theirs).max(axis=1) / np.maximum(np.abs(theirs).max(axis=1), 1e-12)).max())
    v.check(dot <= lim.dot, f"dot products: {len(q)} queries x {len(d)} documents, max |difference| "
            f"{dot:.1e} of the query's largest (limit {lim.dot:.0e})",
            f"dot products differ by {dot:.2e} of the largest > {lim.dot:.0e}")
    scale = np.maximum(np.abs(theirs).max(axis=1), 1e-12)
    agree = agreement(list(ours), list(theirs), TOP_K, 2 * lim.dot * scale)   # fp32: twice the dot-product bound
    agree.check(v, precision, TOP_K, f"retrieval by dot product, {len(q)} queries", "retrieval")
    for line in v.lines:
        log(line)
    v.figures.update({"texts": len(texts), "buckets": per, "retrieval": agree.figures(),
                      "dot_error": dot, "precision": precision})
    return v
