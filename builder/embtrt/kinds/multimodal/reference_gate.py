"""The text-and-image gate, one judgement for the build and for `embtrt verify`, against
`SentenceTransformer.encode` of the same texts and the same images (as data URIs): the pooled head's image gate
(embtrt.reference.image_gate: its bounds, fp32 and reduced, and retrieval across the towers), the text tower judged
per length bucket.
"""

from __future__ import annotations

import numpy as np

from ...reference.image_gate import (FP32, REDUCED, SCORE_BOUND, SCORE_TIE, TOP_K, Limits, cosines, cross_tower,  # noqa: F401
                                     limits_for, retrieval)
from ...reference.verdict import Verdict, bucket_rows


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
    cross_tower(v, got_text, got_image, want_text, want_image, precision)
    if log is not None:
        for line in v.lines:
            log(line)
    return v
