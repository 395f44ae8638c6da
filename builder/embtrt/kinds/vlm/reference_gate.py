"""The VLM embedder's gate, one judgement for the build and for `embtrt verify`: its texts, images and texts fused
with images against the model card's computation of the same inputs, by the pooled head's image gate
(embtrt.reference.image_gate): texts cosine min >= 0.99999 at fp32, 0.999 reduced; images and fused inputs >= 0.99999
at fp32, 0.995 reduced (seed 003's multimodal bound); texts ranking images and images ranking texts, fp32 every
top 10 the reference's up to ties, reduced a mean top-10 overlap >= 0.98 and NDCG@10 regression <= 0.005."""

from __future__ import annotations

import numpy as np

from ...reference.image_gate import cosines, cross_tower, limits_for
from ...reference.verdict import Verdict

GROUPS = ("texts", "images", "fused")


def judge(got: dict, want: dict, precision: str = "fp32") -> Verdict:
    """`got` and `want`: each group's vectors (texts, images, fused) -> the verdict, its figures per group."""
    lim = limits_for(precision)
    v = Verdict({"precision": precision})
    for name in GROUPS:
        g, w = np.asarray(got[name], np.float32), np.asarray(want[name], np.float32)
        if g.shape != w.shape:
            v.check(False, f"{name}: shape {g.shape} vs the reference's {w.shape}")
            continue
        bound = lim.text if name == "texts" else lim.image
        low = float(cosines(g, w).min(initial=1.0))
        v.check(low >= bound, f"{name}: {len(w)} inputs, cosine min {low:.6f} (limit {bound})",
                f"{name}: cosine min {low:.6f} < {bound}")
        v.figures[f"{name}_cosine_min"], v.figures[name] = low, len(w)
    if all(np.asarray(got[n]).shape == np.asarray(want[n]).shape for n in ("texts", "images")):
        cross_tower(v, got["texts"], got["images"], want["texts"], want["images"], precision)
    return v
