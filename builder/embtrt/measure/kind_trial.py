"""One `embtrt tune` trial's measurement on a reranker or a sparse encoder: the kind's own bench
requests (measure.rerank, measure.sparse_bench) at every concurrency, figures per concurrency.

Reranker: one query and `RERANK_DOCUMENTS` documents of mixed lengths (real corpus texts) per
request; sparse encoder: one real text per request, as a document. req/s, p50 and p99 as the
embedder's trial has them; a failed request fails the trial."""

from __future__ import annotations

import asyncio

from embtrt_backend.kinds import RERANKER, SPARSE

from ..errors import EmbtrtError

RERANK_DOCUMENTS = 10


def _figures(load) -> dict:
    lat = sorted(load.latencies.values())
    q = (lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3)
    return {"req_per_s": round(load.ok / load.seconds, 2) if load.seconds else 0.0,
            "p50_ms": q(0.5), "p99_ms": q(0.99)}


def kind_trial(kind: str, url: str, model: str, texts: list[str], concurrency: tuple[int, ...], requests: int,
               warmup: int, error: type[EmbtrtError]) -> dict[int, dict]:
    """{concurrency: {req_per_s, p50_ms, p99_ms}} of `model` (a reranker or a sparse encoder) at `url`."""
    from . import rerank, sparse_bench

    out: dict[int, dict] = {}
    for conc in concurrency:
        if kind == RERANKER.name:
            reqs = rerank.bench_requests(texts, RERANK_DOCUMENTS, requests + warmup, seed=conc)
            load = asyncio.run(rerank.measure_load(url, model, reqs, warmup, conc))
        elif kind == SPARSE.name:
            batches = sparse_bench.bench_requests(texts, 1, requests + warmup, seed=conc)
            load = asyncio.run(sparse_bench.measure_load(url, model, batches, warmup, conc, "document"))
        else:
            raise ValueError(f"kind_trial measures rerankers and sparse encoders, not {kind}")
        if load.failures:
            raise error(f"trial requests failed: {[f.message[:200] for f in load.failures[:2]]}",
                        "see the tritonserver log")
        out[conc] = _figures(load)
    return out
