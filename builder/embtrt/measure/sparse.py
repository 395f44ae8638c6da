"""`embtrt verify` on a sparse encoder (docs/sparse.md): the sparse gate (reference.sparse_gate) on
a served deployment, every corpus text encoded over gRPC as a document and as a query against
SparseEncoder; --under-load resends every text in mixed-size requests at a concurrency, each
vector equal to its unloaded value; --against gates one deployment against another."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Callable

import numpy as np

from embtrt_backend.kinds import SPARSE

from ..reference.sparse_gate import judge, limits_for, weight_error
from .driver import Load
from .rerank import RerankReport


def served(url: str, model: str, texts: list[str], which: str) -> tuple[np.ndarray, np.ndarray]:
    """(weights [texts, vocab], tokens per text) as the front door returns them."""
    from ..serve.sparse_client import SparseClient

    with SparseClient(url, model) as c:
        dense = c.encode_dense(texts, input_type=which)
        tokens = np.concatenate([c._infer(texts[i:i + 32], {"input_type": which})[2] for i in range(0, len(texts), 32)])
        return dense, tokens


async def _under_load(url: str, model: str, texts: list[str], base: np.ndarray, vocab: int, concurrency: int,
                      precision: str = "fp32", seed: int = 0) -> tuple[float, int]:
    import tritonclient.grpc.aio as aioclient

    from embtrt_backend.sparse import densify

    from ..serve.wire import text_input

    rng = random.Random(seed)
    jobs, i = [], 0
    while i < len(texts):
        k = rng.choice((1, 3, 7, 16))
        jobs.append((i, texts[i:i + k]))
        i += k
    rng.shuffle(jobs)
    got = np.full_like(base, np.nan)
    c = aioclient.InferenceServerClient(url)
    try:
        async def call(j):
            r = await c.infer(model, [text_input(jobs[j][1])], parameters={"input_type": "document"}, client_timeout=120)
            return r.as_numpy("SPARSE_INDICES"), r.as_numpy("SPARSE_VALUES")

        def keep(j, value):
            first = jobs[j][0]
            got[first:first + len(jobs[j][1])] = densify(value[0], value[1], vocab)

        load = await Load(call, len(jobs), concurrency, on_result=keep).run()
    finally:
        await c.close()
    missing = int(np.isnan(got).any(axis=1).sum())
    worst = weight_error(got, base, precision) if not missing else float("inf")
    return worst, len(load.failures) + missing


def verify_sparse(url: str, model: str, reference: Path | None, texts: list[str], *, under_load: bool = False,
                  concurrency: int = 16, against: tuple[str, str] | None = None,
                  log: Callable[[str], None] = print, trust_remote_code: bool = False) -> RerankReport:
    from ..serve.sparse_client import SparseClient

    rep = RerankReport(figures={"kind": SPARSE.name})
    with SparseClient(url, model) as c:
        params = c.parameters()
        buckets = tuple(int(b) for b in params["embtrt.buckets"].split(","))
        precision = params.get("precision", "fp32")
        vocab = c.vocab
    # the gate's weight bound for the precision: fp32 absolute; bf16 / fp16 of each text's largest weight
    # (another batch shape may round differently), as the reranker's verify takes its reduced bound
    limit, unit = limits_for(precision).weight, ("" if precision == "fp32" else " of the text's largest")
    got = {which: served(url, model, texts, which) for which in ("document", "query")}
    log(f"{model} at {url}: {len(texts)} real texts encoded as documents and as queries")
    if against is not None:
        worst = 0.0
        for which in ("document", "query"):
            other = served(against[0], against[1], texts, which)
            worst = max(worst, weight_error(got[which][0], other[0], precision))
        rep.check(worst <= limit, f"against {against[1]} at {against[0]}: max |weight difference| "
                  f"{worst:.1e}{unit} (limit {limit:.0e})", f"against {against[0]}: weights differ by {worst:.2e}")
        rep.figures["against"] = {"url": against[0], "model": against[1], "max_abs_diff": worst}
    else:
        from ..reference.sparse_ref import load_sparse_encoder

        if reference is None:
            raise ValueError("a sparse encoder's gate needs its SparseEncoder folder (--reference)")
        se = load_sparse_encoder(reference, trust_remote_code)
        rep.add_gate(judge(se, texts, got, buckets, log=lambda _m: None, precision=precision))
    if under_load:
        worst, failed = asyncio.run(_under_load(url, model, texts, got["document"][0], vocab, concurrency, precision))
        rep.check(worst <= limit and failed == 0, f"under load (concurrency {concurrency}, mixed-size requests): "
                  f"max |weight - unloaded| {worst:.1e}{unit} (limit {limit:.0e}), {failed} failed calls",
                  f"under load: max |weight difference| {worst:.2e}, {failed} failed calls")
        rep.figures["under_load"] = {"concurrency": concurrency, "max_abs_diff": worst, "failed": failed}
    return rep
