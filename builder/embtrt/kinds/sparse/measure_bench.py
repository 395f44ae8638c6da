"""`embtrt bench --sparse`: sparse encoders (docs/sparse.md) served over gRPC, texts/s and latency
per length scenario and concurrency (the one load driver, measure.driver), beside in-process
`SparseEncoder.encode_document` / `encode_query` (fp32, batch 32) on the same texts.

The scenarios group the corpus by each text's token count as the front door counts it (its TOKENS
output, asked once): '<=32', '<=128', ... and 'mixed', as the embedding bench does."""

from __future__ import annotations

import asyncio
import random
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np

from embtrt_backend.kinds import SPARSE

from ...measure.driver import Load
from ...measure.kind_measure import inprocess_row, load_row, warm_then_load
from ...measure.texts import length_buckets

OUTPUTS = ("SPARSE_INDICES", "SPARSE_VALUES", "TOKENS")


def token_counts(url: str, model: str, texts: list[str], input_type: str) -> np.ndarray:
    """Each text's token count as the served front door counts it (its TOKENS output)."""
    from .serve import SparseClient

    with SparseClient(url, model) as c:
        step = max(1, min(32, c.batch_size))
        return np.concatenate([c._infer(texts[i:i + step], {"input_type": input_type})[2].reshape(-1)
                               for i in range(0, len(texts), step)])


def bench_requests(pool: list[str], per_request: int, n: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [rng.sample(pool, per_request) if per_request <= len(pool) else rng.choices(pool, k=per_request)
            for _ in range(n)]


async def measure_load(url: str, model: str, reqs: list[list[str]], warmup: int, conc: int, input_type: str) -> Load:
    """Warm-up requests one at a time, then the rest at `conc`; every answer must hold one vector per text."""
    import tritonclient.grpc.aio as aioclient

    from ...serve.wire import text_input

    async with aioclient.InferenceServerClient(url) as c:
        async def call(i: int):
            r = await c.infer(model, [text_input(reqs[i])], parameters={"input_type": input_type}, client_timeout=120)
            if r.as_numpy("SPARSE_INDICES").shape[0] != len(reqs[i]):
                raise RuntimeError(f"{model}: {r.as_numpy('SPARSE_INDICES').shape[0]} vectors for {len(reqs[i])} texts")

        return await warm_then_load(call, len(reqs), warmup, conc)


def inprocess_rows(reference: Path, scenarios: dict[str, list[str]], input_type: str, per_scenario: int,
                   trust_remote_code: bool, progress: Callable[[str], None]) -> list[dict]:
    """SparseEncoder in process, fp32, batch 32 (median of three passes) and one text at a time."""
    from .reference import load_sparse_encoder

    se = load_sparse_encoder(reference, trust_remote_code)
    enc = se.encode_query if input_type == "query" else se.encode_document
    rows = []
    for label, pool in scenarios.items():
        texts = [r[0] for r in bench_requests(pool, 1, per_scenario, seed=7)]
        progress(f"in-process SparseEncoder.encode_{input_type}: {label}, {len(texts)} texts")
        enc(texts[:32], batch_size=32, show_progress_bar=False, convert_to_tensor=True)   # warm
        for batch, name in ((32, "batch 32"), (1, "one text at a time")):
            sample = texts if batch == 32 else texts[:64]
            fields = {"scenario": label, "input_type": input_type, "concurrency": 1, "texts_per_request": batch}
            rows.append(inprocess_row(f"inprocess:SparseEncoder.encode_{input_type}({name}, fp32)", fields,
                                      partial(enc, batch_size=batch, show_progress_bar=False, convert_to_tensor=True),
                                      [sample[i:i + batch] for i in range(0, len(sample), batch)], batch, "texts",
                                      3 if batch == 32 else 1, p50=batch == 1))
    return rows


def bench_sparse(url: str, models: list[str], texts: list[str], *, edges: tuple[int, ...] = (32, 128, 256),
                 only: tuple[str, ...] = (), concurrency: tuple[int, ...] = (1, 32), per_request: int = 1,
                 requests: int = 200, warmup: int = 20, input_type: str = "document",
                 reference: Path | None = None, progress: Callable[[str], None] = lambda m: None,
                 trust_remote_code: bool = False) -> dict:
    """Every --model target ([NAME or NAME@HOST:PORT]) per scenario and concurrency, the same
    requests for each; then the in-process line when `reference` (the SparseEncoder folder) is given."""
    first_name, _, first_url = models[0].partition("@")
    counts = token_counts(first_url or url, first_name, texts, input_type)
    scenarios = {label: [texts[i] for i in rows] for label, rows in length_buckets(counts, edges).items()
                 if not only or label in only}
    rows = []
    for label, pool in scenarios.items():
        for conc in concurrency:
            reqs = bench_requests(pool, per_request, requests + warmup, seed=conc * 7919 + len(label))
            for m in models:
                name, _, murl = m.partition("@")
                progress(f"{m}: {label} at concurrency {conc} ({per_request} text(s) per request, {input_type})")
                load = asyncio.run(measure_load(murl or url, name, reqs, warmup, conc, input_type))
                fields = {"scenario": label, "input_type": input_type, "concurrency": conc, "texts_per_request": per_request}
                rows.append(load_row(f"triton:{m}", fields, load, "texts", per_request))
    if reference is not None:
        rows += inprocess_rows(reference, scenarios, input_type, max(requests * per_request, 64), trust_remote_code, progress)
    return {"kind": SPARSE.name, "input_type": input_type, "models": models, "url": url,
            "scenarios": {k: len(v) for k, v in scenarios.items()}, "results": rows}
