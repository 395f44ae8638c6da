"""One `embtrt tune` trial's measurement on a kind whose front door serves it (a reranker, a sparse
encoder): its `KindMeasure.trial` (the kind's own bench requests) at every concurrency, req/s, p50
and p99 as the embedder's trial has them; a failed request fails the trial."""

from __future__ import annotations

from embtrt_backend.kinds import kind_of

from ..common.plugins import implementation
from ..errors import EmbtrtError
from .kind_measure import figures


def kind_trial(kind: str, url: str, model: str, texts: list[str], concurrency: tuple[int, ...], requests: int,
               warmup: int, error: type[EmbtrtError]) -> dict[int, dict]:
    """{concurrency: {req_per_s, p50_ms, p99_ms}} of `model` (its kind's `measure`) at `url`."""
    m = implementation(kind_of(kind), "measure")(url, model)
    out: dict[int, dict] = {}
    for conc in concurrency:
        load = m.trial(texts, conc, requests, warmup)
        if load.failures:
            raise error(f"trial requests failed: {[f.message[:200] for f in load.failures[:2]]}",
                        "see the tritonserver log")
        f = figures(load)
        out[conc] = {"req_per_s": round(f["req_per_s"], 2), "p50_ms": f["p50_ms"], "p99_ms": f["p99_ms"]}
    return out
