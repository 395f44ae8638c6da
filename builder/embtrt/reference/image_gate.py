"""The pooled head's gate where the input takes images (a text-and-image model's towers, a VLM embedder's texts,
images and fused inputs), against the reference's vectors of the same inputs:

- texts: cosine min >= 0.99999 (fp32); reduced precision: the seed's text bound, 0.999;
- images (and inputs with an image): cosine min >= 0.99999 (fp32); reduced: the seed's multimodal bound, 0.995;
- text-image cosines (fp32): max |served - reference| <= 1e-5 (a bound of its own: the vectors' cosine bound would
  allow 9e-3 in the worst case);
- retrieval both ways, each text against every image and each image against every text (reference.ranking's
  rule): fp32, every row's served top 10 a top-10 ranking of the reference's cosines, two items trading places only
  where their reference cosines are closer than SCORE_TIE (2e-5: twice the cosine bound above, a constant, never the
  error measured); reduced, mean top-10 overlap >= 0.98 and NDCG@10 regression <= 0.005, in both directions.
`*_identical` figures count rows whose served top 10 is the reference's exactly, in order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ranking import Agreement, agreement
from .verdict import Verdict

TOP_K = 10


@dataclass(frozen=True)
class Limits:
    text: float
    image: float


FP32 = Limits(0.99999, 0.99999)
REDUCED = Limits(0.999, 0.995)
SCORE_BOUND = 1e-5   # fp32: max |served - reference| of every text-image cosine: a bound of its own (the towers' cosine
#                      bound allows up to 2 sqrt(2e-5) ~ 9e-3 in the worst case), the number 1 - 0.99999, far above what
#                      fp32 builds measure (test_kind_targets_served, test_image_kind read it from the manifests)
SCORE_TIE = 2 * SCORE_BOUND      # fp32: two cosines each within the bound cross only inside twice it


def limits_for(precision: str) -> Limits:
    return FP32 if precision == "fp32" else REDUCED


def cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return (g * w).sum(1) / np.maximum(np.linalg.norm(g, axis=1) * np.linalg.norm(w, axis=1), 1e-12)


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def retrieval(got_q, got_d, want_q, want_d, k: int = TOP_K) -> Agreement:
    """Each query row's served top k (cosines of got_q against got_d) against the reference's cosines, by
    reference.ranking's rule with the constant fp32 tie SCORE_TIE."""
    return agreement(list(_unit(got_q) @ _unit(got_d).T), list(_unit(want_q) @ _unit(want_d).T), k, SCORE_TIE)


def cross_tower(v: Verdict, got_text, got_image, want_text, want_image, precision: str, against: str = "") -> None:
    """The checks across the towers into `v`: the text-image cosines' error (fp32) and retrieval both ways, on
    one matrix of cosines per side (its transpose ranks texts for each image)."""
    served = _unit(got_text) @ _unit(got_image).T
    scores = _unit(want_text) @ _unit(want_image).T
    err = float(np.abs(served - scores).max(initial=0.0))
    v.figures["score_error"] = err
    if precision == "fp32":
        v.check(err <= SCORE_BOUND, f"text-image cosines{against}: max |difference| {err:.1e} (limit {SCORE_BOUND:.0e})",
                f"text-image cosines{against} differ by {err:.2e} > {SCORE_BOUND:.0e}")
    for name, key, got, want in (("text -> image", "text_to_image", served, scores),
                                 ("image -> text", "image_to_text", served.T, scores.T)):
        agree = agreement(list(got), list(want), TOP_K, SCORE_TIE)
        v.figures.update({f"{key}_{n}": x for n, x in agree.figures().items() if n != "queries"})
        agree.check(v, precision, min(TOP_K, want.shape[1]), f"{name} retrieval{against}", f"{name} retrieval{against}")
