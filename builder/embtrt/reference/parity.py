"""Vector-quality statistics and the gate verdict (DESIGN.md: quality gate)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..repository.gate import Gate
from .verdict import Verdict


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch {a.shape} vs {b.shape}")
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    return (a * b).sum(1) / np.maximum(na * nb, 1e-30)


@dataclass
class CosineStats:
    n: int
    p50: float
    p01: float
    min: float
    worst: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, cos: np.ndarray, k_worst: int = 5) -> "CosineStats":
        if cos.size == 0:
            return cls(0, float("nan"), float("nan"), float("nan"))
        return cls(
            n=int(cos.size),
            p50=float(np.percentile(cos, 50)),
            p01=float(np.percentile(cos, 1)),
            min=float(cos.min()),
            worst=[int(i) for i in np.argsort(cos)[:k_worst]],
        )

    def passes(self, gate: Gate) -> bool:
        return self.n > 0 and self.p50 >= gate.cosine_p50 and self.p01 >= gate.cosine_p01

    def failures(self, gate: Gate) -> list[str]:
        out = []
        if self.n == 0:
            out.append("no vectors compared")
        if self.n and not self.p50 >= gate.cosine_p50:   # a NaN cosine fails too
            out.append(f"cosine p50 {self.p50:.6f} < {gate.cosine_p50}")
        if self.n and not self.p01 >= gate.cosine_p01:
            out.append(f"cosine p01 {self.p01:.6f} < {gate.cosine_p01}")
        return out

    def as_dict(self) -> dict:
        return asdict(self)


def topk_neighbours(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of each row's k nearest rows by cosine, excluding itself."""
    x = np.asarray(x, dtype=np.float64)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-30)
    sim = x @ x.T
    np.fill_diagonal(sim, -np.inf)
    k = min(k, x.shape[0] - 1)
    return np.argsort(-sim, axis=1, kind="stable")[:, :k]


def topk_overlap(ref: np.ndarray, cand: np.ndarray, k: int = 10) -> float:
    """Mean fraction of each row's reference top-k neighbours that the candidate also finds."""
    if ref.shape[0] < 2:
        return 1.0
    r = topk_neighbours(ref, k)
    c = topk_neighbours(cand, k)
    return float(np.mean([len(set(a) & set(b)) / len(a) for a, b in zip(r, c)]))


def recall_at_k(ref: np.ndarray, cand: np.ndarray, k: int = 10) -> tuple[float, float]:
    """(reference recall, candidate recall) of each row's reference top-1 neighbour in top-k.

    Ground truth: the reference's nearest neighbour. The reference itself scores 1.0 by
    construction; the regression is 1.0 - candidate recall.
    """
    if ref.shape[0] < 2:
        return 1.0, 1.0
    truth = topk_neighbours(ref, 1)[:, 0]
    c = topk_neighbours(cand, k)
    hit = np.mean([t in row for t, row in zip(truth, c)])
    return 1.0, float(hit)


class GateReport(Verdict):
    """Per-bucket cosine statistics plus corpus-wide neighbour metrics: the embedder's gate, a
    Verdict (one marked line per check; the failures that decide it) keeping its statistics."""

    def __init__(self, gate: Gate, buckets: dict[str, CosineStats], overall: CosineStats, top10_overlap: float,
                 recall_ref: float, recall_cand: float, worst_texts: list[dict] | None = None) -> None:
        super().__init__()
        self.gate, self.buckets, self.overall, self.top10_overlap = gate, buckets, overall, top10_overlap
        self.recall_ref, self.recall_cand, self.worst_texts = recall_ref, recall_cand, list(worst_texts or [])
        g = gate
        for name, st in buckets.items():
            bad = st.failures(g)
            self.check(st.passes(g), f"bucket {name:>8}: n={st.n:<4} cosine p50 {st.p50:.6f} p01 {st.p01:.6f} "
                       f"min {st.min:.6f}" + ("  (" + "; ".join(bad) + ")" if bad else ""),
                       *(f"bucket {name}: {f}" for f in bad))
        self.check(top10_overlap >= g.top10_overlap, f"top-10 neighbour overlap {top10_overlap:.4f} (>= {g.top10_overlap})",
                   f"top-10 overlap {top10_overlap:.4f} < {g.top10_overlap}")
        self.check(self.recall_regression <= g.recall_regression,
                   f"recall@10 {recall_cand:.4f} vs reference {recall_ref:.4f}, regression {self.recall_regression:.4f} "
                   f"(<= {g.recall_regression})",
                   f"recall@10 regression {self.recall_regression:.4f} > {g.recall_regression}")

    @property
    def recall_regression(self) -> float:
        return self.recall_ref - self.recall_cand

    def as_dict(self, lines: bool = False) -> dict:
        """What the manifest's `parity` and `verify --json`'s `gate` keep (no lines unless asked)."""
        return {
            "passed": self.passed, "failures": list(self.failures),
            "gate": asdict(self.gate),
            "buckets": {k: v.as_dict() for k, v in self.buckets.items()},
            "overall": self.overall.as_dict(),
            "top10_overlap": self.top10_overlap,
            "recall_at_10": {"reference": self.recall_ref, "candidate": self.recall_cand,
                             "regression": self.recall_regression},
            "worst_texts": self.worst_texts,
            **({"lines": list(self.lines)} if lines else {}),
        }


def bucket_label(length: int, buckets: tuple[int, ...], max_seq_length: int) -> str:
    """'<=32', '<=128', ..., and 'over' for texts truncated at the max sequence length."""
    if length > max_seq_length:
        return "over"
    for b in buckets:
        if length <= b:
            return f"<={b}"
    return "over"


def evaluate(ref: np.ndarray, cand: np.ndarray, labels: list[str], gate: Gate,
             texts: list[str] | None = None) -> GateReport:
    cos = cosine_rows(ref, cand)
    order = sorted(set(labels), key=lambda s: (s == "over", int(s[2:]) if s.startswith("<=") else 0))
    per = {lab: CosineStats.of(cos[[i for i, x in enumerate(labels) if x == lab]]) for lab in order}
    overall = CosineStats.of(cos)
    rr, rc = recall_at_k(ref, cand, 10)
    worst = []
    for i in np.argsort(cos)[:5]:
        worst.append({"index": int(i), "cosine": float(cos[i]), "bucket": labels[i],
                      "text": (texts[i][:120] if texts else "")})
    return GateReport(gate, per, overall, topk_overlap(ref, cand, 10), rr, rc, worst)
