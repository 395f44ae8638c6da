"""What the GPU kit measures, in the order it is worth measuring it (issue #67's targets first), and how a
cell is measured so its figures can be trusted:

- the load comes from embtrt.measure.loadgen (requests built before the clock starts, several processes,
  gRPC where tritonclient's stubs and grpcio import, else HTTP), and the same generator drives the floor
  model (no encoder) first: a cell's rate over a third of the floor's is marked as possibly the
  generator's;
- every cell is repeated (`ROUNDS` rounds from the same warmed processes): medians and spreads;
- every timed vector is kept and compared with the fp32 reference of its text (min cosine per cell), and
  the graphs-off cells' vectors with the graphs-on cells' of the same texts;
- the in-process peer (SentenceTransformer.encode, same device and dtype, same texts) is warm (every
  text seen once) and the best of three passes.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

ROUNDS = 3


@dataclass(frozen=True)
class Cell:
    band: str          # the texts' length band, e.g. "<=128" (texts of 33-128 tokens), "512" (449-512)
    per: int           # texts per request
    conc: int          # concurrency
    graphs: bool = True
    requests: int = 400

    @property
    def key(self) -> str:
        return f"{self.band} {self.per}x c{self.conc} graphs {'on' if self.graphs else 'off'}"


# Per model, most valuable first; "inprocess" marks where the in-process peer is measured. Targets (#67):
# bge-m3's shape one text <=128 tokens c1 p50 <= 2 ms, c4 p50 <= 3 ms and p99 <= 5 ms; 512-token texts 8 per
# request c64 >= 1,200 texts/s and >= 0.9x in process; BERT-base one text <=32 c256 >= 5,000 req/s, p99 <= 15 ms.
PLAN: dict[str, list] = {
    "xlmr-large": [Cell("<=128", 1, 1), Cell("<=128", 1, 4), Cell("512", 8, 64, requests=120), "inprocess",
                   Cell("<=128", 1, 1, graphs=False), Cell("<=128", 1, 4, graphs=False),
                   Cell("<=32", 1, 4), Cell("<=128", 1, 64, requests=2000), Cell("<=128", 32, 16, requests=120)],
    "bert-base": [Cell("<=32", 1, 256, requests=4000), Cell("<=32", 1, 1), Cell("<=32", 1, 4), "inprocess",
                  Cell("<=32", 1, 256, graphs=False, requests=4000), Cell("512", 8, 64, requests=120)],
    "minilm": [Cell("<=32", 1, 1), Cell("<=32", 1, 4), Cell("<=32", 1, 256, requests=4000), "inprocess",
               Cell("<=32", 8, 64, requests=400), Cell("<=32", 1, 4, graphs=False)],
}
# The CPU dry run: tiny shapes, few requests, the same code paths (graphs on = the static-shape stand-in).
DRY_PLAN: dict[str, list] = {
    "minilm": [Cell("<=16", 1, 1, requests=24), Cell("<=16", 1, 4, requests=24), "inprocess",
               Cell("<=64", 8, 8, requests=12), Cell("<=16", 1, 4, graphs=False, requests=24)],
    "xlmr-large": [Cell("<=64", 1, 4, graphs=False, requests=24), Cell("<=64", 4, 8, graphs=False, requests=12)],
}
FLOOR = (Cell("floor", 1, 1, requests=1000), Cell("floor", 1, 256, requests=8000))
DRY_FLOOR = (Cell("floor", 1, 1, requests=24), Cell("floor", 1, 8, requests=48))


def payloads(texts: list[str], per: int, n: int) -> tuple[tuple[int, ...], ...]:
    """n requests of `per` text indices each, cycling through the texts."""
    return tuple(tuple((i * per + j) % len(texts) for j in range(per)) for i in range(n))


def spread(values: list) -> dict | None:
    """median, min, max; None where a round had no successful request to measure."""
    if not values or any(v is None for v in values):
        return None
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def summarize(cell: Cell, outcomes: list, plan: tuple, reference: np.ndarray | None) -> dict:
    """The rounds of one cell -> medians and spreads, errors, and the timed vectors' min cosine to the
    reference (the vectors of the last round; every round's are the same requests)."""
    out = {"cell": cell.key, "band": cell.band, "per": cell.per, "concurrency": cell.conc, "graphs": cell.graphs,
           "rounds": len(outcomes), "requests": cell.requests,
           "req_per_s": spread([o.req_per_s for o in outcomes]),
           "texts_per_s": spread([o.req_per_s * cell.per for o in outcomes]),
           "p50_ms": spread([o.percentile_ms(50) for o in outcomes]),
           "p99_ms": spread([o.percentile_ms(99) for o in outcomes]),
           "client_busy": round(max(o.client_busy for o in outcomes), 2),
           "errors": sum(o.errors for o in outcomes), "error_samples": [s for o in outcomes for s in o.error_samples][:3]}
    if reference is not None and outcomes and outcomes[-1].outputs:
        got = outcomes[-1].outputs
        rows = [(v, reference[list(plan[i])]) for i, v in sorted(got.items())]
        v = np.concatenate([r[0] for r in rows]).astype(np.float64)
        w = np.concatenate([r[1] for r in rows]).astype(np.float64)
        cos = np.sum(v * w, axis=1) / (np.linalg.norm(v, axis=1) * np.linalg.norm(w, axis=1))
        cos = np.nan_to_num(cos, nan=-1.0)   # a zero vector is the worst answer, never a skipped one
        out["min_cosine"] = round(float(cos.min()), 7)
        out["vectors_compared"] = int(cos.size)
    return out


def vectors_by_text(outcome, plan: tuple) -> dict[int, np.ndarray]:
    """The timed vectors of one round, by text index."""
    out: dict[int, np.ndarray] = {}
    for i, v in outcome.outputs.items():
        for j, t in enumerate(plan[i]):
            out.setdefault(t, v[j])
    return out


def agreement(a: dict[int, np.ndarray], b: dict[int, np.ndarray]) -> dict | None:
    """Min cosine between two cells' vectors of the same texts (graphs on against graphs off)."""
    common = sorted(set(a) & set(b))
    if not common:
        return None
    v = np.stack([a[t] for t in common]).astype(np.float64)
    w = np.stack([b[t] for t in common]).astype(np.float64)
    cos = np.nan_to_num(np.sum(v * w, axis=1) / (np.linalg.norm(v, axis=1) * np.linalg.norm(w, axis=1)), nan=-1.0)
    return {"texts": len(common), "min_cosine": round(float(cos.min()), 7)}
