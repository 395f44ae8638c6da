"""The multi-vector gate, one judgement for the build and for `embtrt verify`.

ColBERT (MultiVectorEncoder), per side (query, document) and length bucket:
- counts: every text the same number of vectors as encode_query / encode_document (exactly: an
  off-by-one is a skiplist, expansion or truncation error);
- vectors: fp32 max |difference| at most 1e-4; reduced precision: every vector's cosine >= 0.99;
then over 16 queries (half the texts, for fewer than 32) x the other texts as documents:
- MaxSim: fp32 max |score difference| at most 1e-4; reduced: 1e-2 of the query's largest score;
- retrieval (reference.ranking's rule): every query's top 10 documents in the reference's order (fp32), two
  trading places only where their reference scores are closer than twice the MaxSim bound (2e-4); reduced,
  mean top-10 overlap >= 0.98 and NDCG@10 regression <= 0.005.

bge-m3 (FlagEmbedding's BGEM3FlagModel.encode recipe), per bucket:
- dense: cosine min >= 0.99999 (fp32; reduced 0.999);
- ColBERT vectors: counts exact, max |difference| <= 1e-4 (reduced: cosine >= 0.99);
- lexical weights: every token id above 1e-3 on one side present on the other, max |difference| <= 1e-4
  (reduced: ids above 5% of the text's largest weight, 2e-2 of it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from embtrt_backend.kinds.multivector.score import maxsim_matrix

from ...reference.ranking import agreement
from ...reference.verdict import Verdict, bucket_rows

TOP_K, QUERIES = 10, 16


@dataclass(frozen=True)
class Limits:
    vector: float        # fp32: max |difference|; reduced: min cosine (vector_cosine)
    vector_cosine: bool
    score: float         # fp32: absolute; reduced: relative to the query's largest
    dense: float         # min cosine
    weight: float        # fp32: absolute; reduced: relative to the text's largest


FP32 = Limits(1e-4, False, 1e-4, 0.99999, 1e-4)
REDUCED = Limits(0.99, True, 1e-2, 0.999, 2e-2)


def limits_for(precision: str) -> Limits:
    return FP32 if precision == "fp32" else REDUCED


def vector_errors(got: list[np.ndarray], want: list[np.ndarray], lim: Limits) -> tuple[np.ndarray, int]:
    """Per text: max |difference| (fp32) or 1 - min cosine (reduced) of its vectors; and the first text
    whose count differs (-1: none)."""
    bad = next((i for i, (g, w) in enumerate(zip(got, want)) if g.shape != w.shape), -1)
    err = np.zeros(len(want))
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or not len(w):
            continue
        if lim.vector_cosine:
            cos = (g * w).sum(axis=1) / np.maximum(np.linalg.norm(g, axis=1) * np.linalg.norm(w, axis=1), 1e-12)
            err[i] = 1.0 - float(cos.min())
        else:
            err[i] = float(np.abs(g - w).max())
    return err, bad


def _check_vectors(v: Verdict, name: str, got, want, tokens, buckets, lim: Limits, against: str) -> dict:
    err, bad = vector_errors(got, want, lim)
    v.check(bad < 0, f"{name}: every text has the reference's number of vectors ({len(want)} texts)",
            *([f"{name}: text {bad} has {len(got[bad])} vectors, the reference {len(want[bad])}"] if bad >= 0 else []))
    limit = 1.0 - lim.vector if lim.vector_cosine else lim.vector
    what = "1 - min cosine" if lim.vector_cosine else "max |difference|"
    out = {}
    for edge, sel in bucket_rows(tokens, buckets):
        worst = float(err[sel].max())
        out[f"{name}/{edge}"] = {"texts": int(sel.sum()), "error": worst}
        v.check(worst <= limit, f"{name} bucket {edge}: {int(sel.sum())} texts, {what} vs {against} {worst:.1e} "
                f"(limit {limit:.0e})", f"{name} bucket {edge}: {what} {worst:.2e} > {limit:.0e}")
    return out


def judge_colbert(reference: Callable[[list[str], str], list[np.ndarray]], texts: list[str], served: dict,
                  buckets, similarity: str, log: Callable[[str], None] = print, precision: str = "fp32") -> Verdict:
    """served: {"query": (vectors per text, tokens), "document": (...)}; reference(texts, side) -> vectors."""
    lim, v, per, ref = limits_for(precision), Verdict(), {}, {}
    for side in ("query", "document"):
        ref[side] = reference(texts, side)
        got, tokens = served[side]
        per.update(_check_vectors(v, side, got, ref[side], tokens, buckets, lim, f"encode_{side}"))
    nq = min(QUERIES, len(texts) // 2)
    mean = similarity == "meanmaxsim"
    ours = maxsim_matrix(served["query"][0][:nq], served["document"][0][nq:], mean)
    theirs = maxsim_matrix(ref["query"][:nq], ref["document"][nq:], mean)
    diff = np.abs(ours - theirs).max(axis=1)
    if precision != "fp32":
        diff = diff / np.maximum(np.abs(theirs).max(axis=1), 1e-12)
    worst = float(diff.max(initial=0.0))
    v.check(worst <= lim.score, f"{similarity}: {nq} queries x {len(texts) - nq} documents, max |score difference| "
            f"{worst:.1e}{'' if precision == 'fp32' else ' of the largest'} (limit {lim.score:.0e})",
            f"{similarity} scores differ by {worst:.2e} > {lim.score:.0e}")
    tie = 2 * lim.score * (1.0 if precision == "fp32" else np.maximum(np.abs(theirs).max(axis=1), 1e-12))
    agree = agreement(list(ours), list(theirs), TOP_K, tie)   # fp32: twice the score bound
    agree.check(v, precision, TOP_K, f"retrieval by {similarity}, {nq} queries", "retrieval")
    for line in v.lines:
        log(line)
    v.figures.update({"texts": len(texts), "buckets": per, "score_error": worst, "retrieval": agree.figures(),
                      "precision": precision})
    return v


def sparse_errors(got: list[tuple[np.ndarray, np.ndarray]], want: list[dict], lim: Limits) -> tuple[np.ndarray, int]:
    """Per text: the lexical weights' max |difference| over the union of ids (reduced: of its largest);
    and how many ids above the threshold (1e-3; reduced: 5% of the text's largest) are on one side only."""
    err, lost = np.zeros(len(want)), 0
    for i, ((ids, vals), ref) in enumerate(zip(got, want)):
        ours = dict(zip(ids.tolist(), vals.tolist()))
        keys = set(ours) | set(ref)
        t = 0.05 * max(ref.values(), default=0.0) if lim.vector_cosine else 1e-3
        lost += sum(1 for k in keys if max(ours.get(k, 0.0), ref.get(k, 0.0)) > t and (k not in ours or k not in ref))
        d = max((abs(ours.get(k, 0.0) - ref.get(k, 0.0)) for k in keys), default=0.0)
        if lim.vector_cosine:
            d /= max(max(ref.values(), default=0.0), 1e-12)
        err[i] = d
    return err, lost


def judge_m3(reference: dict, texts: list[str], served: dict, buckets, log: Callable[[str], None] = print,
             precision: str = "fp32") -> Verdict:
    """served: {"dense": [n, hidden], "colbert": vectors per text, "lexical": (ids, weights) per text, "tokens"};
    reference: M3Reference.encode's dict."""
    lim, v = limits_for(precision), Verdict()
    g, w = served["dense"], reference["dense_vecs"]
    cos = (g * w).sum(axis=1) / np.maximum(np.linalg.norm(g, axis=1) * np.linalg.norm(w, axis=1), 1e-12)
    low = float(cos.min(initial=1.0))
    v.check(low >= lim.dense, f"dense: {len(texts)} texts, cosine min {low:.6f} vs BGEM3FlagModel's recipe "
            f"(limit {lim.dense})", f"dense cosine {low:.6f} < {lim.dense}")
    per = _check_vectors(v, "colbert", served["colbert"], reference["colbert_vecs"], served["tokens"], buckets, lim,
                         "BGEM3FlagModel's colbert_vecs")
    err, lost = sparse_errors(served["lexical"], reference["lexical_weights"], lim)
    worst = float(err.max(initial=0.0))
    v.check(worst <= lim.weight and lost == 0,
            f"lexical weights: {len(texts)} texts, max |difference| {worst:.1e} (limit {lim.weight:.0e}); "
            f"{lost} token ids above {'5% of the largest' if lim.vector_cosine else '1e-3'} on one side only",
            *([f"lexical weights differ by {worst:.2e} > {lim.weight:.0e}"] if worst > lim.weight else []),
            *([f"lexical weights: {lost} token ids on one side only"] if lost else []))
    for line in v.lines:
        log(line)
    v.figures.update({"texts": len(texts), "buckets": per, "dense_min_cosine": low, "lexical_error": worst,
                      "precision": precision})
    return v
