"""The reranking of one reranker model behind the gateway (`Reranker`): a request's pairs (its query
with each document) to the model's front door, which tokenizes, truncates, plans, scores and applies
the activation itself (docs/rerankers.md), in parts of at most its max batch sent concurrently; the
scores back in document order, and the tokens the front door reports (TOKENS) as the usage.

Every API shape (rerank_schema) comes here as one `RerankRequest`: one semantics behind the routes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
from embtrt_backend.kinds import RERANKER
from embtrt_backend.pairs import DEFAULT

from ...serve import wire
from .admission import Admission
from .config import GatewayConfig
from .errors import ApiError
from .front_door import FrontDoorModel, refusal, repository_of
from .metrics import Metrics
from .rerank_schema import DOC_FIELDS, RerankModel, RerankRequest
from .served import ServedReranker
from .upstream import Upstream

PROBE = ("embtrt readiness probe", "a document")


class Reranker(FrontDoorModel):
    """The gateway of one reranker (repository): admission, the front door's calls, usage."""

    kind, does = RERANKER, "scores every pair"

    def __init__(self, cfg: GatewayConfig, repository: Path | None = None, metrics: Metrics | None = None,
                 upstream: Upstream | None = None, several: bool = False, admission: Admission | None = None) -> None:
        super().__init__(cfg, ServedReranker(repository_of(cfg, repository)), metrics, upstream, several, admission)

    @property
    def schema(self) -> RerankModel:
        return RerankModel(self.served.num_labels, self.served.max_text_bytes)

    async def rerank(self, req: RerankRequest) -> tuple[np.ndarray, int]:
        """-> (each document's score, in document order; the tokens scored, as the front door counts them)."""
        s = self.served
        q, docs = req.query, req.documents
        self.admission.check_count(len(q) * len(docs) + sum(map(len, docs)), "documents")  # each pair: the query too
        await self._check_tokens(q, docs)
        params = {"activation": req.activation, "truncate": req.truncate,
                  "truncation_direction": req.truncation_direction}
        mb = s.max_batch_size  # the front door takes at most its max batch per call: larger requests in parts
        parts = self.parts(docs)
        field = DOC_FIELDS[req.api]
        done = await asyncio.gather(*(self._frontdoor(q, p, params, field, k * mb) for k, p in enumerate(parts)))
        scores = done[0][0] if len(done) == 1 else np.concatenate([d[0] for d in done])
        tokens = sum(int(d[1].sum()) for d in done)
        self.metrics.count(self.pool.name, len(docs), tokens)
        return scores, tokens

    async def _check_tokens(self, query: str, docs: list[str]) -> None:
        """The token cap (--max-request-tokens): a pair is at most the max length (cut, or refused by the
        front door with truncate false), and a token covers at least one UTF-8 byte; where that bound does
        not prove the request under the cap, its pairs are tokenized here (off the loop) and counted."""
        s, cap = self.served, self.admission.cfg.max_request_tokens
        per_pair = 4 * len(query) + 4  # the query's bytes and a pair's special tokens ([CLS] q [SEP] d [SEP], <s> ..)
        bound = sum(min(per_pair + 4 * len(d), s.max_len) for d in docs)
        if bound <= cap:
            return
        tok = s.tokenizer
        if tok is None:  # no tokenizer to count with: the bound decides
            raise ApiError(413, f"the input may be up to {bound} tokens; this gateway takes at most {cap} per request "
                           "(--max-request-tokens): split it", param="documents", code="request_too_large")
        enc = await self.admission.offload(len(query) * len(docs) + sum(map(len, docs)), tok.encode,
                                           [query] * len(docs), docs, DEFAULT)
        self.admission.check_tokens(int(enc.lengths.sum()), "documents")

    async def _frontdoor(self, query: str, docs: list[str], params: dict, field: str = "documents",
                         offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """One call of pairs (the documents from `offset` on) to the front door -> (each pair's score, each
        pair's tokens). A pair the front door refuses (INVALID_ARG, "row N: ...") is a 400 naming the
        request's document: `field[offset + N]`."""
        s = self.served
        inputs = [wire.text_input([query] * len(docs), "QUERY"), wire.text_input(docs, "DOCUMENT")]
        try:
            scores, tokens = await self.upstream.calls(self.pool, 0, s.name, inputs, ("SCORES", "TOKENS"), params)
        except ApiError as exc:
            if exc.status != 400:
                raise
            raise refusal(exc.message, field, offset) from None
        if scores.ndim != 2 or scores.shape != (len(docs), s.num_labels):
            raise ApiError(502, f"{s.name}'s front door answered SCORES of shape {list(scores.shape)} for "
                           f"{len(docs)} pairs; expected [{len(docs)}, {s.num_labels}]", type_="server_error")
        return scores[:, 0], tokens.reshape(-1)

    async def ready(self) -> dict[str, str]:
        """The pool must score a pair with a finite score; {pool: 'ok' | reason}."""
        try:
            scores, _ = await self._frontdoor(PROBE[0], [PROBE[1]], {})
            state = "ok" if np.all(np.isfinite(scores)) else "non-finite score"
        except ApiError as exc:
            state = exc.message
        return {self.pool.name: state}

    def describe(self) -> dict:
        """This model's /v1/models entry."""
        s = self.served
        return {"id": s.name, "object": "model", "created": 0, "owned_by": "embtrt", "kind": self.kind.name,
                "embtrt": s.identity, "num_labels": s.num_labels, "activation": s.activation,
                "max_seq_length": s.max_len, "routes": ["/v1/rerank", "/v2/rerank", "/rerank", "/v1/ranking"]}
