"""`embtrt verify` on a page-image retriever (docs/visual-documents.md): its gate (reference_gate) on a served
deployment, the corpus texts that fit as queries and the gate's 16 seeded page images encoded over gRPC against
ColPaliForRetrieval; --under-load resends every query in mixed-size requests at a concurrency, each one's
vectors equal to their unloaded values, beside a background of page requests held to theirs; --against compares
two deployments by the same bounds. `embtrt tune`'s trial: one query per request."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from embtrt_backend.kinds import PAGES
from embtrt_backend.token_vectors import maxsim_matrix, unpadded

from ...measure.driver import Load
from ...measure.kind_measure import KindMeasure, KindReport, text_trial
from ...reference.images import gate_images
from ...reference.verdict import Verdict
from .reference_gate import COSINE, SCORE, judge, min_cosines

UNDER_LOAD = 1e-4   # max |difference| of a query's vector under load (the same model, other batches)
MARGIN = 32         # the query prefix and augmentation, in tokens: a text of at most max - MARGIN bytes fits


def fits(texts: list[str], max_tokens: int) -> list[str]:
    """The texts that are queries within the model's length whatever the tokenizer (a token covers at least one
    UTF-8 byte): longer ones are refused, not cut."""
    return [t for t in texts if len(t.encode("utf-8")) <= max_tokens - MARGIN]


def _rows(vectors: list[np.ndarray], width: int) -> np.ndarray:
    out = np.zeros((len(vectors), width), dtype=np.float32)
    for i, v in enumerate(vectors):
        out[i, :v.size] = v.reshape(-1)
    return out


class PagesMeasure(KindMeasure):
    kind, value = PAGES, "vector"
    beside = ", beside page requests"

    def read(self) -> None:
        from .serve import PageImageClient

        with PageImageClient(self.url, self.model) as c:
            p = c.parameters()
        self.max_tokens, self.dim = int(p["max_seq_length"]), int(p["embtrt.dim"])
        self.images = [f for f, _ in gate_images()]

    def queries(self, texts: list[str]) -> list[str]:
        return fits(texts, self.max_tokens)

    def served(self, texts: list[str], url: str, model: str) -> dict:
        from .serve import PageImageClient

        with PageImageClient(url, model) as c:
            out = {"queries": c.encode_queries(self.queries(texts)), "images": c.encode_pages(self.images)}
        if (url, model) == (self.url, self.model):   # the unloaded page vectors the background is held to
            self.unloaded_pages, self.background_worst = out["images"], 0.0
        return out

    def described(self, texts: list[str]) -> str:
        return f"{len(self.queries(texts))} real texts as queries and {len(self.images)} seeded page images encoded"

    def limit(self) -> tuple[float, str]:
        return UNDER_LOAD, ""

    def against(self, rep: KindReport, got, other, where: tuple[str, str]) -> float:
        worst = 0.0
        for name in ("queries", "images"):
            low, bad = min_cosines(got[name], other[name])
            rep.check(bad < 0 and low >= COSINE, f"against {where[1]} at {where[0]}: {name}' token-vector cosine min "
                      f"{low:.6f} (limit {COSINE})", f"against {where[0]}: {name} differ (cosine {low:.6f}, item {bad})")
            worst = max(worst, 1.0 - low)
        diff = float(np.abs(maxsim_matrix(got["queries"], got["images"]) -
                            maxsim_matrix(other["queries"], other["images"])).max(initial=0.0))
        rep.check(diff <= SCORE, f"against {where[1]}: MaxSim max |difference| {diff:.1e} (limit {SCORE:.0e})",
                  f"against {where[0]}: MaxSim differs by {diff:.2e}")
        return worst

    def gate(self, reference: Path, texts: list[str], got, trust_remote_code: bool) -> Verdict:
        from transformers.image_utils import load_image

        from ...reference.images import data_uri
        from .reference import encode_images, encode_queries, load_reference, score

        ref = load_reference(reference, trust_remote_code)
        want = {"queries": encode_queries(ref, self.queries(texts)),
                "images": encode_images(ref, [load_image(data_uri(f, fmt)) for f, fmt in gate_images()])}
        return judge(got, want, score(ref, want["queries"], want["images"]))

    def groups(self, texts: list[str]) -> list[int]:
        return [len(self.queries(texts))]

    def unloaded(self, got) -> np.ndarray:
        return _rows(got["queries"], self.max_tokens * self.dim)

    def error(self, got: np.ndarray, base: np.ndarray) -> float:
        return max(float(np.abs(got - base).max(initial=0.0)), getattr(self, "background_worst", 0.0))

    async def call(self, client, texts: list[str], group: int, first: int, count: int) -> np.ndarray:
        from ...serve.wire import outputs, text_input

        r = await client.infer(self.model, [text_input(self.queries(texts)[first:first + count])],
                               outputs=outputs("TOKEN_EMBEDDINGS", "TOKEN_COUNTS"), client_timeout=120)
        return _rows(unpadded(r.as_numpy("TOKEN_EMBEDDINGS"), r.as_numpy("TOKEN_COUNTS")), self.max_tokens * self.dim)

    def background(self, client, texts: list[str], concurrency: int) -> list[Load]:
        """Page requests of 1 to 4 images beside the queries, each one's vectors held to their unloaded values."""
        from ...serve.wire import outputs, text_input

        async def one(i: int) -> None:
            picks = [(i + j) % len(self.images) for j in range(1 + i % 4)]
            diff = float("inf")
            try:
                r = await client.infer(self.model, [text_input([self.images[p] for p in picks], "IMAGE")],
                                       outputs=outputs("TOKEN_EMBEDDINGS", "TOKEN_COUNTS"), client_timeout=120)
                got = unpadded(r.as_numpy("TOKEN_EMBEDDINGS"), r.as_numpy("TOKEN_COUNTS"))
                diff = max(float(np.abs(g - self.unloaded_pages[p]).max()) for g, p in zip(got, picks))
            finally:
                self.background_worst = max(self.background_worst, diff)

        return [Load(one, 2 * len(self.images), max(1, concurrency // 4))]

    def trial(self, texts: list[str], conc: int, requests: int, warmup: int) -> Load:
        """One real query per request (within the served model's length: read first, as tune calls this alone)."""
        if not hasattr(self, "max_tokens"):
            self.read()
        return text_trial(self.url, self.model, self.queries(texts), conc, requests, warmup)
