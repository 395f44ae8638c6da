"""The text-and-image gate, one judgement for the build and for `embtrt verify`, against
`SentenceTransformer.encode` of the same texts and the same images (as data URIs):

- text tower, per length bucket: cosine min >= 0.99999 (fp32); reduced precision: the seed's text bound, 0.999;
- image tower: cosine min >= 0.99999 (fp32); reduced: the seed's multimodal bound, 0.995;
- retrieval across the towers, each text against every image and each image against every text: the top
  10 identical for every row (fp32), up to ties: the served top 10 must be a top-10 ranking of the reference's
  cosines in which two items may swap only where their reference cosines are closer than twice the row's
  measured score error (largest |served cosine - reference cosine| of the row, plus 1e-6): a swap the
  vectors' own measured noise explains, never one it does not (that noise is held small by the per-tower
  cosine bound, which refuses vectors far enough off to reorder items that are not tied); reduced: mean
  top-10 overlap >= 0.9.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...reference.verdict import Verdict, bucket_rows

TOP_K = 10


@dataclass(frozen=True)
class Limits:
    text: float
    image: float
    overlap: float


FP32 = Limits(0.99999, 0.99999, 1.0)
REDUCED = Limits(0.999, 0.995, 0.9)
TIE_FLOOR = 1e-6   # beside twice a row's measured score error: float noise of the cosines themselves


def limits_for(precision: str) -> Limits:
    return FP32 if precision == "fp32" else REDUCED


def cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return (g * w).sum(1) / np.maximum(np.linalg.norm(g, axis=1) * np.linalg.norm(w, axis=1), 1e-12)


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def top(scores: np.ndarray, k: int) -> list[list[int]]:
    """Each row's k best columns, best first (ties by index)."""
    return [list(np.lexsort((np.arange(len(r)), -r))[:k]) for r in scores]


def ranks_within(order: list[int], want: np.ndarray, k: int, tie: float) -> bool:
    """Is `order` (a served top k, best first) a top-k ranking of the reference's scores `want`, up to ties closer
    than `tie`: every item at least every later one and every item left out, each less `tie`?"""
    want = np.asarray(want, np.float64)
    vals = want[list(order)]
    if len(vals) != min(k, len(want)):
        return False
    rest = np.delete(want, list(order))
    if rest.size and vals.min() < rest.max() - tie:   # a better item left out
        return False
    later = np.maximum.accumulate(vals[::-1])[::-1][1:]   # the best of each item's followers
    return bool(np.all(vals[:-1] >= later - tie))


def retrieval(got_q, got_d, want_q, want_d, k: int = TOP_K) -> tuple[int, float]:
    """(rows whose top k ranks as the reference's up to ties the row's measured score error explains, mean top-k
    overlap) of the served against the reference's cosine ranking."""
    scores = _unit(want_q) @ _unit(want_d).T
    served = _unit(got_q) @ _unit(got_d).T
    ties = 2 * np.abs(served - scores).max(axis=1, initial=0.0) + TIE_FLOOR
    g, w = top(served, k), top(scores, k)
    same = sum(ranks_within(a, s, k, t) for a, s, t in zip(g, scores, ties))
    overlap = float(np.mean([len(set(a) & set(b)) / max(1, len(b)) for a, b in zip(g, w)])) if g else 1.0
    return same, overlap


def judge(want_text: np.ndarray, got_text: np.ndarray, tokens: np.ndarray, buckets, want_image: np.ndarray,
          got_image: np.ndarray, precision: str = "fp32", log=None) -> Verdict:
    lim = limits_for(precision)
    v = Verdict({"precision": precision, "texts": int(len(want_text)), "images": int(len(want_image))})
    if got_text.shape != want_text.shape or got_image.shape != want_image.shape:
        v.check(False, f"shapes: texts {got_text.shape} vs {want_text.shape}, images {got_image.shape} vs {want_image.shape}")
        return v
    tc = cosines(got_text, want_text)
    per: dict[str, dict] = {}
    for edge, sel in bucket_rows(tokens, buckets):
        worst = float(tc[sel].min())
        per[str(edge)] = {"rows": int(sel.sum()), "cosine_min": worst}
        v.check(worst >= lim.text, f"texts, bucket {edge}: {int(sel.sum())} texts, cosine min {worst:.6f} "
                f"(limit {lim.text})", f"texts in bucket {edge}: cosine min {worst:.6f} < {lim.text}")
    ic = cosines(got_image, want_image)
    v.figures.update(text_buckets=per, text_cosine_min=float(tc.min()) if len(tc) else 1.0,
                     image_cosine_min=float(ic.min()) if len(ic) else 1.0,
                     max_abs_diff=float(max(np.abs(got_text - want_text).max(initial=0.0),
                                            np.abs(got_image - want_image).max(initial=0.0))))
    v.check(float(ic.min()) >= lim.image, f"images: {len(ic)} images, cosine min {float(ic.min()):.6f} (limit {lim.image})",
            f"images: cosine min {float(ic.min()):.6f} < {lim.image}")
    k = min(TOP_K, len(want_image), len(want_text))
    t2i = retrieval(got_text, got_image, want_text, want_image, k)
    i2t = retrieval(got_image, got_text, want_image, want_text, k)
    v.figures.update(text_to_image_identical=t2i[0], image_to_text_identical=i2t[0],
                     text_to_image_overlap=t2i[1], image_to_text_overlap=i2t[1])
    for name, (same, overlap), rows in (("text -> image", t2i, len(want_text)), ("image -> text", i2t, len(want_image))):
        if lim.overlap >= 1.0:
            v.check(same == rows, f"{name} retrieval: top {k} identical (up to ties within the measured score error) "
                    f"for {same} of {rows} rows",
                    f"{name} retrieval: top {k} differs for {rows - same} of {rows} rows")
        else:
            v.check(overlap >= lim.overlap, f"{name} retrieval: mean top-{k} overlap {overlap:.3f} (limit {lim.overlap})",
                    f"{name} retrieval: top-{k} overlap {overlap:.3f} < {lim.overlap}")
    if log is not None:
        for line in v.lines:
            log(line)
    return v
