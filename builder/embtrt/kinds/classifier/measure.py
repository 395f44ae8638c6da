"""`embtrt verify` and `embtrt tune` on a classifier (docs/classifiers.md), on the kind scaffold
(measure.kind_measure): the gate's texts and pairs (reference.gate_inputs) scored over gRPC against
transformers in process (reference_gate); --under-load resends every row in mixed-size requests, each
score equal to its unloaded value; --against gates one deployment against another; a tune trial
sends requests of TRIAL_TEXTS real texts."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import numpy as np
from embtrt_backend.kinds import CLASSIFIER

from ...measure.driver import Load
from ...measure.kind_measure import KindMeasure, KindReport, warm_then_load
from ...reference.verdict import Verdict
from .reference import gate_inputs, load_classifier, reference_scores
from .reference_gate import judge, tolerance_for

TRIAL_TEXTS = 8   # texts per request of a tune trial


async def _classify(client, model: str, texts: list[str], pairs: list[str] | None = None, max_batch: int = 32):
    """Texts (and pairs) scored in parts of at most the front door's max batch, concurrently, in order."""
    from ...serve.wire import text_input

    async def part(a: list[str], b: list[str] | None):
        inputs = [text_input(a, "TEXT")] + ([text_input(b, "TEXT_PAIR")] if b is not None else [])
        r = await client.infer(model, inputs, client_timeout=120)
        return r.as_numpy("SCORES"), r.as_numpy("TOKENS").reshape(-1)

    parts = await asyncio.gather(*(part(texts[i:i + max_batch], None if pairs is None else pairs[i:i + max_batch])
                                   for i in range(0, len(texts), max_batch)))
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


class ClassifyMeasure(KindMeasure):
    kind, value = CLASSIFIER, "score"

    def read(self) -> None:
        from .serve import ClassifyClient

        with ClassifyClient(self.url, self.model) as c:
            p = c.parameters()
            self.buckets = tuple(int(b) for b in p["buckets"].split(","))
            self.precision, self.activation = p.get("precision", "fp32"), p.get("activation", "softmax")

    def served(self, texts: list[str], url: str, model: str) -> tuple[np.ndarray, np.ndarray]:
        from .serve import ClassifyClient

        self.singles, (self.firsts, self.seconds) = gate_inputs(texts)
        with ClassifyClient(url, model) as c:
            a, b = c.scores(self.singles), c.scores(self.firsts, self.seconds)
        return np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]])

    def described(self, texts: list[str]) -> str:
        return f"{len(self.singles)} real texts and {len(self.firsts)} real pairs classified ({self.precision})"

    def against(self, rep: KindReport, got, other, where: tuple[str, str]) -> float:
        (got, tokens), (other, tok2) = got, other
        limit = tolerance_for(self.precision)
        worst = float(np.abs(got - other).max())
        rep.check(worst <= limit and np.array_equal(tokens, tok2),
                  f"against {where[1]} at {where[0]}: max |score difference| {worst:.1e} (limit {limit:.0e}), token "
                  f"counts {'equal' if np.array_equal(tokens, tok2) else 'differ'}",
                  f"against {where[0]}: scores differ by {worst:.2e} or token counts differ")
        return worst

    def gate(self, reference: Path, texts: list[str], got, trust_remote_code: bool) -> Verdict:
        model = load_classifier(reference, self.buckets[-1], trust_remote_code)
        want = np.concatenate([reference_scores(model, self.singles, None, self.activation),
                               reference_scores(model, self.firsts, self.seconds, self.activation)])
        return judge(got[0], want, got[1], self.buckets, log=lambda _m: None, precision=self.precision,
                     what="texts and pairs")

    def limit(self) -> tuple[float, str]:
        return tolerance_for(self.precision), ""

    def groups(self, texts: list[str]) -> list[int]:
        return [len(self.singles), len(self.firsts)]

    def unloaded(self, got) -> np.ndarray:
        return got[0]

    def error(self, got: np.ndarray, base: np.ndarray) -> float:
        return float(np.abs(got - base).max())

    async def call(self, client, texts: list[str], group: int, first: int, count: int) -> np.ndarray:
        if group == 0:
            return (await _classify(client, self.model, self.singles[first:first + count]))[0]
        at = first - len(self.singles)
        return (await _classify(client, self.model, self.firsts[at:at + count], self.seconds[at:at + count]))[0]

    def background(self, client, texts: list[str], concurrency: int) -> list[Load]:
        rng = random.Random(1)
        return [Load(lambda i: _classify(client, self.model, rng.sample(texts, 8)), None, max(1, concurrency // 4))]

    def trial(self, texts: list[str], conc: int, requests: int, warmup: int) -> Load:
        rng = random.Random(conc)
        reqs = [rng.sample(texts, TRIAL_TEXTS) for _ in range(requests + warmup)]
        return asyncio.run(_trial(self.url, self.model, reqs, warmup, conc))


async def _trial(url: str, model: str, reqs: list[list[str]], warmup: int, conc: int) -> Load:
    import tritonclient.grpc.aio as aioclient

    async with aioclient.InferenceServerClient(url) as c:
        mb = int((await c.get_model_config(model, as_json=True))["config"].get("max_batch_size", 32)) or 32
        return await warm_then_load(lambda i: _classify(c, model, reqs[i], max_batch=mb), len(reqs), warmup, conc)


verify_classifier = ClassifyMeasure.verify


def bench_classifier(url: str, models: list[str], texts: list[str], concurrency: tuple[int, ...] = (1, 8),
                     per_request: int = TRIAL_TEXTS, requests: int = 50, warmup: int = 5, reference: Path | None = None,
                     progress=lambda m: None, trust_remote_code: bool = False) -> list[dict]:
    """Rows of each (model, concurrency): requests of `per_request` real texts over gRPC, the same texts for
    every target; then transformers in process (batch 32, fp32) on the same texts where `reference` is given."""
    from functools import partial

    from ...measure.kind_measure import inprocess_row, load_row
    rows = []
    for conc in concurrency:
        rng = random.Random(conc)
        reqs = [rng.sample(texts, per_request) if per_request <= len(texts) else rng.choices(texts, k=per_request)
                for _ in range(requests + warmup)]
        for target in models:
            name, _, at = target.partition("@")   # NAME or NAME@HOST:PORT, as the CLI's other benches
            u = at or url
            progress(f"{name}@{u}: {per_request} texts per request at concurrency {conc}")
            load = asyncio.run(_trial(u, name, reqs, warmup, conc))
            rows.append(load_row(f"triton:{name}@{u}", {"texts_per_request": per_request, "concurrency": conc}, load,
                                 "texts", per_request))
    if reference is not None:
        from .reference import hf_logits

        model = load_classifier(reference, None, trust_remote_code)
        body = [t for r in [random.Random(concurrency[0]).sample(texts, per_request) for _ in range(requests)] for t in r]
        calls = [body[i:i + 32] for i in range(0, len(body), 32)]
        hf_logits(model, calls[0])   # warm
        rows.append(inprocess_row("inprocess:transformers(batch 32, fp32)", {"texts_per_request": per_request,
                                                                             "concurrency": 1},
                                  partial(hf_logits, model), calls, per_request, "texts"))
    return rows
