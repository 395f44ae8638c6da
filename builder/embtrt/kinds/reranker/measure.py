"""`embtrt verify` and `embtrt bench` on a reranker (docs/rerankers.md).

verify: the reranker gate (reference_gate) on a served deployment: real query-passage
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
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np

from embtrt_backend.kinds import RERANKER

from .reference import corpus_pairs
from .reference_gate import TOP_K, judge, per_query, tolerance_for
from ...common.plugins import implementation
from ...reference.detect import detect
from ...reference.verdict import Verdict
from ...measure.driver import Load
from ...measure.kind_measure import KindMeasure, KindReport, inprocess_row, load_row, warm_then_load

TRIAL_DOCUMENTS = 10   # documents per request of a tune trial


async def _score(client, model: str, query: str, docs: list[str], params: dict | None = None, max_batch: int = 32):
    """One query's documents scored: in parts of at most the front door's max batch, sent
    concurrently (as RerankClient and the gateway send them), put back in order."""
    from ...serve.wire import text_input

    async def part(ds: list[str]):
        r = await client.infer(model, [text_input([query] * len(ds), "QUERY"), text_input(ds, "DOCUMENT")],
                               parameters=params or None, client_timeout=120)
        return r.as_numpy("SCORES"), r.as_numpy("TOKENS").reshape(-1)

    parts = await asyncio.gather(*(part(docs[i:i + max_batch]) for i in range(0, len(docs), max_batch)))
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def front_door_parameters(url: str, model: str) -> dict[str, str]:
    """The served reranker's front-door parameters (its buckets, precision, prompt template, ...)."""
    from .serve import RerankClient

    with RerankClient(url, model) as c:
        return c.parameters()


def buckets_of(url: str, model: str, p: dict[str, str] | None = None) -> tuple[tuple[int, ...], str]:
    """The served front door's buckets and precision (fp32, or bf16 on python-openvino), from its parameters `p`
    where the caller has them."""
    p = front_door_parameters(url, model) if p is None else p
    return tuple(int(b) for b in p["buckets"].split(",")), p.get("precision", "fp32")


class RerankMeasure(KindMeasure):
    """The reranker's verify: every corpus pair scored over gRPC, one query's documents a request."""

    kind, value, beside = RERANKER, "score", " beside background traffic"

    def read(self) -> None:
        p = front_door_parameters(self.url, self.model)
        self.buckets, self.precision = buckets_of(self.url, self.model, p)
        self.template = p.get("pair_template", "")   # an LLM-style reranker's prompt template ("" none)

    def served(self, texts: list[str], url: str, model: str) -> tuple[np.ndarray, np.ndarray]:
        """Every pair's scores and tokens, one query's documents at a time (the client splits by max batch)."""
        from .serve import RerankClient

        self.queries, self.docs = corpus_pairs(texts)
        with RerankClient(url, model) as c:
            parts = [c.score(q, ds) for q, ds in zip(self.queries, self.docs)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def described(self, texts: list[str]) -> str:
        return f"{sum(map(len, self.docs))} real pairs ({len(self.queries)} queries) scored ({self.precision})"

    def against(self, rep: KindReport, got, other, where: tuple[str, str]) -> float:
        (got, tokens), (other, tok2) = got, other
        if self.precision == "fp32":
            self.precision = buckets_of(*where)[1]
        precision, limit = self.precision, tolerance_for(self.precision)
        worst = float(np.abs(got - other).max())
        rep.check(worst <= limit and np.array_equal(tokens, tok2),
                  f"against {where[1]} at {where[0]}: max |score difference| {worst:.1e} (limit {limit:.0e}), "
                  f"token counts {'equal' if np.array_equal(tokens, tok2) else 'differ'}",
                  f"against {where[0]}: scores differ by {worst:.2e} or token counts differ")
        if got.shape[1] == 1:
            from ...reference.ranking import agreement

            agree = agreement(per_query(got, self.docs), per_query(other, self.docs), TOP_K, 2 * limit)
            agree.check(rep, precision, TOP_K, f"ranking against {where[1]}", f"ranking against {where[0]}")
        return worst

    def gate(self, reference: Path, texts: list[str], got, trust_remote_code: bool) -> Verdict:
        from .reference import load_cross_encoder
        from .reference_llm import reference_of

        ce = reference_of(load_cross_encoder(reference, trust_remote_code=trust_remote_code), self.template)
        return judge(ce, self.queries, self.docs, got[0], got[1], self.buckets, log=lambda _m: None, precision=self.precision)

    def limit(self) -> tuple[float, str]:
        return tolerance_for(self.precision), ""   # bf16: another batch shape may round differently

    def groups(self, texts: list[str]) -> list[int]:
        self.flat = [d for ds in self.docs for d in ds]
        self.starts = np.cumsum([0] + [len(ds) for ds in self.docs])
        return [len(ds) for ds in self.docs]

    def unloaded(self, got) -> np.ndarray:
        return got[0]

    def error(self, got: np.ndarray, base: np.ndarray) -> float:
        return float(np.abs(got - base).max())

    async def call(self, client, texts: list[str], group: int, first: int, count: int) -> np.ndarray:
        at = first - self.starts[group]
        return (await _score(client, self.model, self.queries[group], self.docs[group][at:at + count]))[0]

    def background(self, client, texts: list[str], concurrency: int) -> list[Load]:
        rng = random.Random(1)
        return [Load(lambda i: _score(client, self.model, self.queries[i % len(self.queries)], rng.sample(self.flat, 8)),
                     None, max(1, concurrency // 4))]

    def trial(self, texts: list[str], conc: int, requests: int, warmup: int) -> Load:
        """One query and TRIAL_DOCUMENTS documents of mixed lengths (real corpus texts) per request."""
        reqs = bench_requests(texts, TRIAL_DOCUMENTS, requests + warmup, seed=conc)
        return asyncio.run(measure_load(self.url, self.model, reqs, warmup, conc))


verify_reranker = RerankMeasure.verify


def bench_requests(texts: list[str], k: int, n: int, seed: int) -> list[tuple[str, list[str]]]:
    """n requests of one query (a short real text) and k documents of mixed lengths (corpus texts)."""
    rng = random.Random(seed)
    queries = [t.split(".")[0][:120] for t in texts[:32]]
    return [(rng.choice(queries), rng.sample(texts, k) if k <= len(texts) else rng.choices(texts, k=k)) for _ in range(n)]


async def measure_load(url: str, model: str, reqs: list[tuple[str, list[str]]], warmup: int, conc: int) -> Load:
    """Warm-up requests one at a time, then the rest at `conc` through the load driver."""
    import tritonclient.grpc.aio as aioclient

    async with aioclient.InferenceServerClient(url) as c:
        mb = int((await c.get_model_config(model, as_json=True))["config"].get("max_batch_size", 32)) or 32
        return await warm_then_load(lambda i: _score(c, model, *reqs[i], max_batch=mb), len(reqs), warmup, conc)


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

        return await warm_then_load(lambda i: one(*reqs[i]), len(reqs), warmup, conc)


def bench_reranker(url: str, model: str, texts: list[str], documents: tuple[int, ...] = (1, 10, 32, 100),
                   concurrency: tuple[int, ...] = (1, 8), requests: int = 50, warmup: int = 5,
                   reference: Path | None = None, progress: Callable[[str], None] = lambda m: None,
                   trust_remote_code: bool = False, http: bool = False) -> list[dict]:
    """Rows of each (documents, concurrency) over Triton's gRPC (`http`: an HTTP rerank API, _measure_http),
    the same requests for every target; then in-process CrossEncoder.predict where `reference` is given."""
    measure, who = (_measure_http, f"{model}@{url}") if http else (measure_load, model)
    rows = []
    for k in documents:
        for conc in concurrency:
            reqs = bench_requests(texts, k, requests + warmup, seed=k * 1000 + conc)   # the same requests for every target
            progress(f"{who}: {k} documents per request at concurrency {conc}")
            load = asyncio.run(measure(url, model, reqs, warmup, conc))
            rows.append(load_row(f"{'http' if http else 'triton'}:{who}", {"documents": k, "concurrency": conc}, load, "pairs", k))
    ranks_otherwise = detect(reference).kind if reference is not None else None
    if ranks_otherwise is not None and ranks_otherwise.rank_inprocess:   # late interaction: its kind's own, in process
        bodies = [bench_requests(texts, k, requests + warmup, seed=k * 1000 + concurrency[0])[warmup:] for k in documents]
        return rows + implementation(ranks_otherwise, "rank_inprocess")(reference, bodies, documents, trust_remote_code)
    if reference is not None:
        from .reference import load_cross_encoder
        from .reference_llm import reference_of

        ce = load_cross_encoder(reference, trust_remote_code=trust_remote_code)
        template = "" if http else front_door_parameters(url, model).get("pair_template", "")
        peer = "CrossEncoder.predict(batch 32, fp32)"
        if template:   # an LLM-style reranker: the pairs through its template, as the served ones (the model card's)
            ce, peer = reference_of(ce, template), "model card (CrossEncoder's model, the template; batch 32, fp32)"
        for k in documents:   # the pairs of the first concurrency's measured requests: the same texts as served
            body = bench_requests(texts, k, requests + warmup, seed=k * 1000 + concurrency[0])[warmup:]
            pairs = [(q, d) for q, ds in body for d in ds]
            ce.predict(pairs[:32], batch_size=32, show_progress_bar=False)   # warm
            rows.append(inprocess_row(f"inprocess:{peer}", {"documents": k, "concurrency": 1},
                                      partial(ce.predict, batch_size=32, show_progress_bar=False), [pairs], k, "pairs"))
    return rows


bench_http_reranker = partial(bench_reranker, http=True)
