"""`embtrt verify` on a multi-vector encoder (docs/multivector.md): its gate (reference_gate) on a served
deployment, every corpus text encoded over gRPC as a query and as a document (ColBERT: against
MultiVectorEncoder) or with the three outputs (bge-m3: against BGEM3FlagModel's recipe); --under-load
resends every text in mixed-size requests at a concurrency, each text's vectors equal to their unloaded
values; --against gates one deployment against another. `embtrt tune`'s trial: one text per request."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from embtrt_backend.kinds import MULTIVECTOR

from ...measure.driver import Load
from ...measure.kind_measure import KindMeasure, KindReport, text_trial
from ...reference.verdict import Verdict
from .reference_gate import judge_colbert, judge_m3, limits_for, vector_errors


def _flat(vectors: list[np.ndarray], width: int) -> np.ndarray:
    """Each text's vectors flattened into one zero-padded row (the under-load check compares rows)."""
    out = np.zeros((len(vectors), width), dtype=np.float32)
    for i, v in enumerate(vectors):
        out[i, :v.size] = v.reshape(-1)
    return out


def _vectors(parts: list[dict]) -> list[np.ndarray]:
    from embtrt_backend.kinds.multivector.core import unpadded

    return [v.copy() for r in parts for v in unpadded(r["TOKEN_EMBEDDINGS"], r["TOKEN_COUNTS"])]


def _tokens(parts: list[dict]) -> np.ndarray:
    return np.concatenate([r["TOKENS"].reshape(-1) for r in parts])


class MultiVectorMeasure(KindMeasure):
    kind, value = MULTIVECTOR, "vector"

    def read(self) -> None:
        from .serve import MultiVectorClient

        with MultiVectorClient(self.url, self.model) as c:
            p = c.parameters()
        self.buckets = tuple(int(b) for b in p["embtrt.buckets"].split(","))
        self.precision, self.layout = p.get("precision", "fp32"), p["mv_layout"]
        self.width = max(int(p["mv_query_length"]), int(p["mv_document_length"])) * int(p["mv_dim"])
        self.document_length = int(p["mv_document_length"])   # the served cut (the build's --max-seq-length)

    def served(self, texts: list[str], url: str, model: str) -> dict:
        from .serve import MultiVectorClient

        vectors = ("TOKEN_EMBEDDINGS", "TOKEN_COUNTS", "TOKENS")
        with MultiVectorClient(url, model) as c:   # each text once per side, its tokens from the same call
            if self.layout == "m3":
                parts = list(c._batches(texts, {}, ("DENSE", "SPARSE_INDICES", "SPARSE_VALUES", *vectors)))
                return {"dense": np.concatenate([r["DENSE"] for r in parts]), "colbert": _vectors(parts),
                        "tokens": _tokens(parts),
                        "lexical": [(ix[ix >= 0], v[ix >= 0]) for r in parts
                                    for ix, v in zip(r["SPARSE_INDICES"], r["SPARSE_VALUES"])]}
            out = {}
            for side in ("query", "document"):
                parts = list(c._batches(texts, {"input_type": side}, vectors))
                out[side] = (_vectors(parts), _tokens(parts))
            return out

    def described(self, texts: list[str]) -> str:
        return f"{len(texts)} real texts encoded " + ("with the three outputs" if self.layout == "m3" else "as queries and as documents")

    def limit(self) -> tuple[float, str]:
        lim = limits_for(self.precision)
        return (1.0 - lim.vector, " (1 - cosine)") if lim.vector_cosine else (lim.vector, "")

    def _vectors(self, got) -> list[np.ndarray]:
        return got["colbert"] if self.layout == "m3" else got["document"][0]

    def against(self, rep: KindReport, got, other, where: tuple[str, str]) -> float:
        limit, unit = self.limit()
        err, bad = vector_errors(self._vectors(got), self._vectors(other), limits_for(self.precision))
        worst = float(err.max(initial=0.0))
        rep.check(bad < 0 and worst <= limit, f"against {where[1]} at {where[0]}: the same vector counts, max difference "
                  f"{worst:.1e}{unit} (limit {limit:.0e})", f"against {where[0]}: vectors differ by {worst:.2e}")
        return worst

    def gate(self, reference: Path, texts: list[str], got, trust_remote_code: bool) -> Verdict:
        from .reference import colbert_encode, load_m3, load_multivector

        quiet = lambda _m: None
        if self.layout == "m3":
            ref = load_m3(reference, self.document_length, trust_remote_code)
            return judge_m3(ref.encode(texts), texts, got, self.buckets, quiet, self.precision)
        mve = load_multivector(reference, trust_remote_code)
        mve[0].document_length = self.document_length   # cut as served (a build's --max-seq-length below the folder's)
        return judge_colbert(lambda t, side: colbert_encode(mve, t, side), texts, got, self.buckets,
                             mve.similarity_fn_name, quiet, self.precision)

    def groups(self, texts: list[str]) -> list[int]:
        return [len(texts)]

    def unloaded(self, got) -> np.ndarray:
        return _flat(self._vectors(got), self.width)

    def error(self, got: np.ndarray, base: np.ndarray) -> float:
        return float(np.abs(got - base).max(initial=0.0))

    async def call(self, client, texts: list[str], group: int, first: int, count: int) -> np.ndarray:
        from embtrt_backend.kinds.multivector.core import unpadded

        from ...serve.wire import outputs, text_input

        r = await client.infer(self.model, [text_input(texts[first:first + count])], parameters={"input_type": "document"},
                               outputs=outputs("TOKEN_EMBEDDINGS", "TOKEN_COUNTS"), client_timeout=120)
        return _flat(unpadded(r.as_numpy("TOKEN_EMBEDDINGS"), r.as_numpy("TOKEN_COUNTS")), self.width)

    def trial(self, texts: list[str], conc: int, requests: int, warmup: int) -> Load:
        """One real text per request, as a document."""
        return text_trial(self.url, self.model, texts, conc, requests, warmup, {"input_type": "document"})


verify_multivector = MultiVectorMeasure.verify


def inprocess_maxsim_rows(reference: Path, bodies: list[list[tuple[str, list[str]]]], documents, trust_remote_code: bool
                          ) -> list[dict]:
    """`embtrt bench --rerank-documents` with a MultiVectorEncoder --reference: in process, each request's query
    (encode_query) and documents (encode_document, batch 32) encoded and scored by MultiVectorEncoder.similarity
    (MaxSim), fp32, on the same requests as the served targets -> one row per document count, in pairs/s."""
    from ...errors import SpecError
    from ...measure.kind_measure import inprocess_row
    from .reference import is_multivector, load_multivector

    if not is_multivector(reference):   # bge-m3: its MaxSim peer in process is FlagEmbedding's, not measured here
        raise SpecError(f"{reference}: the in-process MaxSim peer of `bench --rerank-documents` is MultiVectorEncoder's "
                        "(a ColBERT folder); this one is not", "pass --no-inprocess, or a ColBERT --reference")
    mve = load_multivector(reference, trust_remote_code)

    def run(call: list[tuple[str, str]]) -> None:
        mve.similarity(mve.encode_query([call[0][0]], show_progress_bar=False),
                       mve.encode_document([d for _, d in call], batch_size=32, show_progress_bar=False))

    rows = []
    for k, body in zip(documents, bodies):
        calls = [[(q, d) for d in ds] for q, ds in body]
        run(calls[0])   # warm
        rows.append(inprocess_row("inprocess:MultiVectorEncoder(encode_query + encode_document + similarity, fp32)",
                                  {"documents": k, "concurrency": 1}, run, calls, k, "pairs"))
    return rows
