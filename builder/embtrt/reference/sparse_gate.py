"""The sparse gate, one judgement for the build and for `embtrt verify`: served weights of real
texts against SparseEncoder.encode_document and .encode_query per length bucket (max |weight
difference|, active dimensions counted), and for 16 queries the top 10 documents by dot product."""

from __future__ import annotations

from typing import Callable

import numpy as np

from .sparse_ref import se_encode

TOLERANCE = 1e-4   # fp32: max |served weight - SparseEncoder weight| per bucket
TOP_K = 10
QUERIES = 16


def judge(se, texts: list[str], served: dict[str, tuple[np.ndarray, np.ndarray]], buckets: tuple[int, ...] | list[int],
          log: Callable[[str], None] = print, tolerance: float = TOLERANCE) -> dict:
    """served: {"document": (weights [texts, vocab], tokens), "query": (...)} of every text in order."""
    lines, failures, per = [], [], {}
    b = np.asarray(buckets)
    ref = {}
    for which in ("document", "query"):
        want = se_encode(se, texts, which)
        ref[which] = want
        got, tokens = served[which]
        diff = np.abs(got - want).max(axis=1)
        bucket = b[np.minimum(np.searchsorted(b, tokens), len(b) - 1)]
        for edge in b:
            sel = bucket == edge
            if not sel.any():
                continue
            worst = float(diff[sel].max())
            nnz_w, nnz_g = int((want[sel] > 0).sum()), int((got[sel] > 0).sum())
            per[f"{which}/{int(edge)}"] = {"texts": int(sel.sum()), "max_abs_diff": worst, "active": [nnz_w, nnz_g]}
            ok = worst <= tolerance
            lines.append(f"[{'ok' if ok else 'x'}] {which} bucket {int(edge)}: {int(sel.sum())} texts, max |weight - "
                         f"SparseEncoder.encode_{which}| {worst:.1e} (limit {tolerance:.0e}); active dimensions "
                         f"{nnz_g} served, {nnz_w} reference")
            if not ok:
                failures.append(f"{which} bucket {int(edge)}: max |weight difference| {worst:.2e} > {tolerance:.0e}")
    q, d = served["query"][0][:QUERIES], served["document"][0][QUERIES:]
    rq, rd = ref["query"][:QUERIES], ref["document"][QUERIES:]
    ours = np.argsort(-(q @ d.T), axis=1, kind="stable")[:, :TOP_K]
    theirs = np.argsort(-(rq @ rd.T), axis=1, kind="stable")[:, :TOP_K]
    same = int((ours == theirs).all(axis=1).sum())
    ok = same == len(q)
    lines.append(f"[{'ok' if ok else 'x'}] retrieval: top {TOP_K} documents by dot product identical for {same} of "
                 f"{len(q)} queries")
    if not ok:
        failures.append(f"retrieval: top {TOP_K} differs for {len(q) - same} of {len(q)} queries")
    for line in lines:
        log(line)
    return {"texts": len(texts), "buckets": per, "retrieval_identical": same, "passed": not failures,
            "failures": failures, "lines": lines}
