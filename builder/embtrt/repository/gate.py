"""The vector-quality gate's thresholds (DESIGN.md). A build records the gate it passed in
embtrt.json, so later checks (TensorRT plans on the GPU host, verify) judge with the same."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecError


@dataclass(frozen=True)
class Gate:
    """The vector-quality gate of DESIGN.md; every value may be overridden."""

    cosine_p50: float = 0.9999
    cosine_p01: float = 0.999
    top10_overlap: float = 0.98
    recall_regression: float = 0.005

    def __post_init__(self) -> None:
        for fname in ("cosine_p50", "cosine_p01", "top10_overlap"):
            v = getattr(self, fname)
            if not -1.0 <= v <= 1.0:
                raise SpecError(f"gate.{fname}={v} is out of range", "allowed: -1.0 .. 1.0")
        if not 0.0 <= self.recall_regression <= 1.0:
            raise SpecError(f"gate.recall_regression={self.recall_regression} is out of range", "allowed: 0.0 .. 1.0")
