"""`embtrt verify` and `embtrt bench` on a reranker (docs/rerankers.md).

verify: the reranker gate (reference.rerank_gate) on a served deployment: real query-passage
    pairs scored over gRPC against CrossEncoder.predict / .rank; --under-load resends every pair
    in mixed-size requests beside background traffic, each score equal to its unloaded value;
    --against gates one deployment against another (scores and ranks).
bench: requests of one query and K documents of mixed lengths at each concurrency (the one load
    driver, measure.driver), pairs/s and latency, beside in-process CrossEncoder.predict (fp32,
    batch 32) on the same pairs.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from pathlib import Path
from typing import Callable

import numpy as np

from embtrt_backend.kinds import RERANKER

from ..reference.cross_ref import corpus_pairs
from ..reference.rerank_gate import REDUCED_OVERLAP, TOP_K, judge, tolerance_for
from ..reference.verdict import Verdict
from .driver import Load, drive


async def _score(client, model: str, query: str, docs: list[str], params: dict | None = None, max_batch: int = 32):
    """One query's documents scored: in parts of at most the front door's max batch, sent
    concurrently (as RerankClient and the gateway send them), put back in order."""
    from ..serve.wire import text_input

    async def part(ds: list[str]):
        r = await client.infer(model, [text_input([query] * len(ds), "QUERY"), text_input(ds, "DOCUMENT")],
                               parameters=params or None, client_timeout=120)
        return r.as_numpy("SCORES"), r.as_numpy("TOKENS").reshape(-1)

    parts = await asyncio.gather(*(part(docs[i:i + max_batch]) for i in range(0, len(docs), max_batch)))
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def served(url: str, model: str, queries: list[str], docs: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """Every pair's scores and tokens, one query's documents at a time (the client splits by max batch)."""
    from ..serve.rerank_client import RerankClient

    with RerankClient(url, model) as c:
        parts = [c.score(q, ds) for q, ds in zip(queries, docs)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def buckets_of(url: str, model: str) -> tuple[tuple[int, ...], str]:
    """The served front door's buckets and precision (fp32, or bf16 on python-openvino)."""
    from ..serve.rerank_client import RerankClient

    with RerankClient(url, model) as c:
        p = c.parameters()
        return tuple(int(b) for b in p["buckets"].split(",")), p.get("precision", "fp32")


class RerankReport(Verdict):
    """`embtrt verify` of a reranker (or a sparse encoder: figures {"kind": "sparse"}): the gate's
    verdict or the comparison with another server, and the under-load check."""

    def __init__(self, figures: dict | None = None) -> None:
        super().__init__({"kind": RERANKER.name, **(figures or {})})

    def add_gate(self, gate: Verdict) -> None:
        """A gate's verdict (reference.rerank_gate / sparse_gate .judge): its lines, failures, figures."""
        self.add(gate, "gate")

    def as_dict(self, lines: bool = True) -> dict:
        return {"kind": self.figures["kind"], "passed": self.passed, "failures": list(self.failures),
                **({"lines": list(self.lines)} if lines else {}), **self.figures}


async def _under_load(url: str, model: str, queries: list[str], docs: list[list[str]], base: np.ndarray,
                      concurrency: int, seed: int = 0) -> tuple[float, int]:
    """Every pair resent in requests of 1..max documents (mixed sizes) at `concurrency`, beside a
    background load of random pairs -> (max |score - unloaded score|, failed calls)."""
    import tritonclient.grpc.aio as aioclient

    rng = random.Random(seed)
    jobs = []   # (first pair index, query, documents)
    start = 0
    for q, ds in zip(queries, docs):
        i = 0
        while i < len(ds):
            k = rng.choice((1, 3, 7, 16))
            jobs.append((start + i, q, ds[i:i + k]))
            i += k
        start += len(ds)
    rng.shuffle(jobs)
    got = np.full_like(base, np.nan)
    flat = [d for ds in docs for d in ds]
    c = aioclient.InferenceServerClient(url)
    try:
        async def call(i):
            return await _score(c, model, jobs[i][1], jobs[i][2])

        def keep(i, value):
            first = jobs[i][0]
            got[first:first + len(jobs[i][2])] = value[0]

        async def noise(i):
            return await _score(c, model, queries[i % len(queries)], rng.sample(flat, 8))

        load = Load(call, len(jobs), concurrency, on_result=keep)
        await drive(load, [Load(noise, None, max(1, concurrency // 4))], lead_s=0.2)
    finally:
        await c.close()
    worst = float(np.nanmax(np.abs(got - base))) if np.isfinite(got).any() else float("inf")
    missing = int(np.isnan(got).any(axis=1).sum())
    return (worst if not missing else float("inf")), len(load.failures) + missing


def verify_reranker(url: str, model: str, reference: Path | None, texts: list[str], *, under_load: bool = False,
                    concurrency: int = 16, against: tuple[str, str] | None = None,
                    log: Callable[[str], None] = print, trust_remote_code: bool = False) -> RerankReport:
    rep = RerankReport()
    queries, docs = corpus_pairs(texts)
    buckets, precision = buckets_of(url, model)
    got, tokens = served(url, model, queries, docs)
    log(f"{model} at {url}: {len(tokens)} real pairs ({len(queries)} queries) scored ({precision})")
    if against is not None:
        other, tok2 = served(against[0], against[1], queries, docs)
        if precision == "fp32":
            precision = buckets_of(*against)[1]
        limit = tolerance_for(precision)
        worst = float(np.abs(got - other).max())
        rep.check(worst <= limit and np.array_equal(tokens, tok2),
                  f"against {against[1]} at {against[0]}: max |score difference| {worst:.1e} (limit {limit:.0e}), "
                  f"token counts {'equal' if np.array_equal(tokens, tok2) else 'differ'}",
                  f"against {against[0]}: scores differ by {worst:.2e} or token counts differ")
        if got.shape[1] == 1:
            from ..reference.ranking import Agreement, top_k

            bounds = np.cumsum([0] + [len(ds) for ds in docs])
            agree = Agreement.of([top_k(got[a:b, 0], TOP_K) for a, b in zip(bounds, bounds[1:])],
                                 [top_k(other[a:b, 0], TOP_K) for a, b in zip(bounds, bounds[1:])])
            same, overlap = agree.identical, agree.overlap
            rep.check(agree.passes(None if precision == "fp32" else REDUCED_OVERLAP),
                      f"ranking: top {TOP_K} identical for {same} of {len(docs)} queries, overlap {overlap:.3f}"
                      + ("" if precision == "fp32" else f" (limit {REDUCED_OVERLAP}, {precision})"),
                      f"ranking against {against[0]}: {len(docs) - same} queries differ")
        rep.figures["against"] = {"url": against[0], "model": against[1], "max_abs_diff": worst}
    else:
        from ..reference.cross_ref import load_cross_encoder

        if reference is None:
            raise ValueError("a reranker's gate needs its CrossEncoder folder (--reference)")
        ce = load_cross_encoder(reference, trust_remote_code=trust_remote_code)
        rep.add_gate(judge(ce, queries, docs, got, tokens, buckets, log=lambda _m: None, precision=precision))
    if under_load:
        worst, failed = asyncio.run(_under_load(url, model, queries, docs, got, concurrency))
        limit = tolerance_for(precision)   # bf16: another batch shape may round differently
        rep.check(worst <= limit and failed == 0,
                  f"under load (concurrency {concurrency}, mixed-size requests beside background traffic): "
                  f"max |score - unloaded| {worst:.1e} (limit {limit:.0e}), {failed} failed calls",
                  f"under load: max |score difference| {worst:.2e}, {failed} failed calls")
        rep.figures["under_load"] = {"concurrency": concurrency, "max_abs_diff": worst, "failed": failed}
    return rep


def bench_requests(texts: list[str], k: int, n: int, seed: int) -> list[tuple[str, list[str]]]:
    """n requests of one query (a short real text) and k documents of mixed lengths (corpus texts)."""
    rng = random.Random(seed)
    queries = [t.split(".")[0][:120] for t in texts[:32]]
    return [(rng.choice(queries), rng.sample(texts, k) if k <= len(texts) else rng.choices(texts, k=k)) for _ in range(n)]


def _row(target: str, k: int, conc: int, load: Load) -> dict:
    lat = sorted(load.latencies.values())
    q = (lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3) if lat else (lambda p: float("nan"))
    return {"target": target, "documents": k, "concurrency": conc, "requests": load.ok,
            "req_per_s": load.ok / load.seconds if load.seconds else 0.0,
            "pairs_per_s": load.ok * k / load.seconds if load.seconds else 0.0,
            "p50_ms": q(0.5), "p99_ms": q(0.99), "errors": len(load.failures),
            "error_samples": [f.message[:200] for f in load.failures[:3]]}


async def measure_load(url: str, model: str, reqs: list[tuple[str, list[str]]], warmup: int, conc: int) -> Load:
    """Warm-up requests one at a time, then the rest at `conc` through the load driver."""
    import tritonclient.grpc.aio as aioclient

    c = aioclient.InferenceServerClient(url)
    try:
        mb = int((await c.get_model_config(model, as_json=True))["config"].get("max_batch_size", 32)) or 32
        for q, ds in reqs[:warmup]:
            await _score(c, model, q, ds, max_batch=mb)
        body = reqs[warmup:]
        return await Load(lambda i: _score(c, model, *body[i], max_batch=mb), len(body), conc).run()
    finally:
        await c.close()


async def _measure_http(url: str, model: str, reqs: list[tuple[str, list[str]]], warmup: int, conc: int) -> Load:
    """The same requests to an HTTP rerank API of the Cohere / Jina shape (infinity, vLLM, the embtrt
    gateway, whose /rerank takes this body as vLLM's): POST <url>/rerank {model, query, documents,
    return_documents: false} -> {results: [{index, relevance_score}]}: the documents are not sent back
    by infinity (its default) or the gateway; vLLM has no such flag and always returns them."""
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
        async def one(q: str, ds: list[str]):
            async with s.post(f"{url.rstrip('/')}/rerank", json={"model": model, "query": q, "documents": ds,
                                                        "return_documents": False}) as r:
                body = await r.json()
                if r.status != 200 or len(body.get("results", ())) != len(ds):
                    raise RuntimeError(f"HTTP {r.status}: {str(body)[:200]}")
                return body

        for q, ds in reqs[:warmup]:
            await one(q, ds)
        body = reqs[warmup:]
        return await Load(lambda i: one(*body[i]), len(body), conc).run()


def bench_http_reranker(url: str, model: str, texts: list[str], documents: tuple[int, ...], concurrency: tuple[int, ...],
                        requests: int, warmup: int, progress: Callable[[str], None] = lambda m: None) -> list[dict]:
    rows = []
    for k in documents:
        for conc in concurrency:
            reqs = bench_requests(texts, k, requests + warmup, seed=k * 1000 + conc)   # the same requests as Triton's
            progress(f"{model}@{url}: {k} documents per request at concurrency {conc}")
            rows.append(_row(f"http:{model}@{url}", k, conc, asyncio.run(_measure_http(url, model, reqs, warmup, conc))))
    return rows


def bench_reranker(url: str, model: str, texts: list[str], documents: tuple[int, ...] = (1, 10, 32, 100),
                   concurrency: tuple[int, ...] = (1, 8), requests: int = 50, warmup: int = 5,
                   reference: Path | None = None, progress: Callable[[str], None] = lambda m: None,
                   trust_remote_code: bool = False) -> dict:
    rows = []
    for k in documents:
        for conc in concurrency:
            reqs = bench_requests(texts, k, requests + warmup, seed=k * 1000 + conc)
            progress(f"{model}: {k} documents per request at concurrency {conc}")

            rows.append(_row(f"triton:{model}", k, conc, asyncio.run(measure_load(url, model, reqs, warmup, conc))))
    if reference is not None:
        from ..reference.cross_ref import load_cross_encoder

        ce = load_cross_encoder(reference, trust_remote_code=trust_remote_code)
        for k in documents:   # the pairs of the first concurrency's measured requests: the same texts as served
            body = bench_requests(texts, k, requests + warmup, seed=k * 1000 + concurrency[0])[warmup:]
            pairs = [(q, d) for q, ds in body for d in ds]
            ce.predict(pairs[:32], batch_size=32, show_progress_bar=False)   # warm
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                ce.predict(pairs, batch_size=32, show_progress_bar=False)
                times.append(time.perf_counter() - t0)
            sec = statistics.median(times)
            rows.append({"target": "inprocess:CrossEncoder.predict(batch 32, fp32)", "documents": k, "concurrency": 1,
                         "requests": len(pairs) // k, "req_per_s": len(pairs) / k / sec, "pairs_per_s": len(pairs) / sec,
                         "p50_ms": float("nan"), "p99_ms": float("nan"), "errors": 0, "error_samples": []})
    return {"model": model, "url": url, "results": rows}


def markdown(doc: dict) -> str:
    lines = ["| target | documents | conc | req/s | pairs/s | p50 ms | p99 ms | errors |", "|---|---|---|---|---|---|---|---|"]
    for r in doc["results"]:
        lines.append(f"| {r['target']} | {r['documents']} | {r['concurrency']} | {r['req_per_s']:.1f} | "
                     f"{r['pairs_per_s']:.1f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['errors']} |")
    return "\n".join(lines) + "\n"
