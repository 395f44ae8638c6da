"""`embtrt verify` on a sparse encoder (docs/sparse.md): the sparse gate (reference_gate) on
a served deployment, every corpus text encoded over gRPC as a document and as a query against
SparseEncoder; --under-load resends every text in mixed-size requests at a concurrency, each
vector equal to its unloaded value; --against gates one deployment against another."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from embtrt_backend.kinds import SPARSE

from .measure_bench import bench_requests, measure_load
from .reference_gate import judge, limits_for, weight_error
from ...reference.verdict import Verdict
from ...measure.driver import Load
from ...measure.kind_measure import KindMeasure, KindReport

SIDES = ("document", "query")


def served(url: str, model: str, texts: list[str], which: str) -> tuple[np.ndarray, np.ndarray]:
    """(weights [texts, vocab], tokens per text) as the front door returns them."""
    from .serve import SparseClient

    with SparseClient(url, model) as c:
        dense = c.encode_dense(texts, input_type=which)
        tokens = np.concatenate([c._infer(texts[i:i + 32], {"input_type": which})[2] for i in range(0, len(texts), 32)])
        return dense, tokens


class SparseMeasure(KindMeasure):
    """The sparse encoder's verify: every corpus text encoded as a document and as a query."""

    kind, value = SPARSE, "weight"

    def read(self) -> None:
        from .serve import SparseClient

        with SparseClient(self.url, self.model) as c:
            params = c.parameters()
            self.buckets = tuple(int(b) for b in params["embtrt.buckets"].split(","))
            self.precision = params.get("precision", "fp32")
            self.vocab = c.vocab

    def served(self, texts: list[str], url: str, model: str) -> dict:
        return {which: served(url, model, texts, which) for which in SIDES}

    def described(self, texts: list[str]) -> str:
        return f"{len(texts)} real texts encoded as documents and as queries"

    def limit(self) -> tuple[float, str]:
        # the gate's weight bound for the precision: fp32 absolute; bf16 / fp16 of each text's largest weight
        # (another batch shape may round differently), as the reranker's verify takes its reduced bound
        return limits_for(self.precision).weight, ("" if self.precision == "fp32" else " of the text's largest")

    def against(self, rep: KindReport, got, other, where: tuple[str, str]) -> float:
        (limit, unit), precision = self.limit(), self.precision
        worst = max(weight_error(got[w][0], other[w][0], precision) for w in SIDES)
        rep.check(worst <= limit, f"against {where[1]} at {where[0]}: max |weight difference| "
                  f"{worst:.1e}{unit} (limit {limit:.0e})", f"against {where[0]}: weights differ by {worst:.2e}")
        return worst

    def gate(self, reference: Path, texts: list[str], got, trust_remote_code: bool) -> Verdict:
        from .reference import load_sparse_encoder

        se = load_sparse_encoder(reference, trust_remote_code)
        return judge(se, texts, got, self.buckets, log=lambda _m: None, precision=self.precision)

    def groups(self, texts: list[str]) -> list[int]:
        return [len(texts)]

    def unloaded(self, got) -> np.ndarray:
        return got["document"][0]

    def error(self, got: np.ndarray, base: np.ndarray) -> float:
        return weight_error(got, base, self.precision)

    async def call(self, client, texts: list[str], group: int, first: int, count: int) -> np.ndarray:
        from embtrt_backend.sparse_weights import densify

        from ...serve.wire import text_input

        r = await client.infer(self.model, [text_input(texts[first:first + count])],
                               parameters={"input_type": "document"}, client_timeout=120)
        return densify(r.as_numpy("SPARSE_INDICES"), r.as_numpy("SPARSE_VALUES"), self.vocab)

    def trial(self, texts: list[str], conc: int, requests: int, warmup: int) -> Load:
        """One real text per request, as a document."""
        batches = bench_requests(texts, 1, requests + warmup, seed=conc)
        return asyncio.run(measure_load(self.url, self.model, batches, warmup, conc, "document"))


verify_sparse = SparseMeasure.verify
