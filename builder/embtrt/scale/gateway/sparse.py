"""The sparse encoding of one sparse encoder (SPLADE) behind the gateway (`Sparse`): a request's texts
to the model's front door, which prompts, tokenizes, truncates, encodes and keeps each text's active
dimensions itself (docs/sparse.md), in parts of at most its max batch sent concurrently; the vectors
back in input order, and the tokens the front door reports (TOKENS) as the usage.

Both API shapes (sparse_schema) come here as one `SparseRequest`: one semantics behind the routes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
from embtrt_backend.kinds import SPARSE

from ...serve import wire
from .admission import Admission
from .config import GatewayConfig
from .errors import ApiError
from .front_door import FrontDoorModel, refusal, repository_of
from .metrics import Metrics
from .served import ServedSparse
from .sparse_schema import INPUT_FIELDS, SparseModel, SparseRequest
from .upstream import Upstream

PROBE = "embtrt readiness probe"
OUTPUTS = ("SPARSE_INDICES", "SPARSE_VALUES", "TOKENS")

Vector = tuple[np.ndarray, np.ndarray]           # one text's (indices ascending, values)


class Sparse(FrontDoorModel):
    """The gateway of one sparse encoder (repository): admission, the front door's calls, usage."""

    kind, does = SPARSE, "encodes every text"

    def __init__(self, cfg: GatewayConfig, repository: Path | None = None, metrics: Metrics | None = None,
                 upstream: Upstream | None = None, several: bool = False, admission: Admission | None = None) -> None:
        super().__init__(cfg, ServedSparse(repository_of(cfg, repository)), metrics, upstream, several, admission)

    @property
    def schema(self) -> SparseModel:
        return SparseModel(self.served.options, self.served.max_text_bytes)

    async def encode(self, req: SparseRequest) -> tuple[list[Vector], int]:
        """-> (each text's active dimensions, in input order; the tokens encoded, as the front door counts them)."""
        s, texts = self.served, req.texts
        field = INPUT_FIELDS[req.api]
        self.admission.check_count(sum(map(len, texts)), field)
        await self._check_tokens(req, field)
        mb = s.max_batch_size  # the front door takes at most its max batch per call: larger requests in parts
        parts = self.parts(texts)
        done = await asyncio.gather(*(self._frontdoor(p, req.parameters, field, k * mb) for k, p in enumerate(parts)))
        vecs = [v for d in done for v in d[0]]
        tokens = sum(int(d[1].sum()) for d in done)
        self.metrics.count(self.pool.name, len(texts), tokens)
        return vecs, tokens

    async def _check_tokens(self, req: SparseRequest, field: str) -> None:
        """The token cap (--max-request-tokens): a text is at most the max length (cut, or refused by the
        front door with truncate NONE), and a token covers at least one UTF-8 byte; where that bound does
        not prove the request under the cap, the texts are prepared by the front door's own request core
        here (prompt, tokenize; off the loop) and counted."""
        s, cap, opts = self.served, self.admission.cfg.max_request_tokens, req.options
        bound = self.admission.token_bound(req.texts, 4 + 4 * len(opts.prompt), s.max_len)
        if bound <= cap:
            return
        from embtrt_backend.core import Request

        batch = await self.admission.offload(sum(map(len, req.texts)), s.core.prepare, [Request(req.texts, None, opts)])
        refused = batch.outcomes[0]
        if refused is not None and refused.error is not None:
            raise refusal(str(refused.error), field, 0)
        self.admission.check_tokens(sum(len(x) for c in batch.chunks for x in c.ids), field)

    async def _frontdoor(self, texts: list[str], params: dict, field: str = "input",
                         offset: int = 0) -> tuple[list[Vector], np.ndarray]:
        """One call of texts (the request's from `offset` on) to the front door -> (each text's active
        dimensions, each text's tokens). A text the front door refuses (INVALID_ARG, "row N: ...") is a
        400 naming the request's item: `field[offset + N]`."""
        s = self.served
        try:
            idx, val, tokens = await self.upstream.calls(self.pool, 0, s.name, [wire.text_input(texts)], OUTPUTS,
                                                         params or None)
        except ApiError as exc:
            if exc.status != 400:
                raise
            raise refusal(exc.message, field, offset) from None
        if idx.ndim != 2 or idx.shape != val.shape or len(idx) != len(texts):
            raise ApiError(502, f"{s.name}'s front door answered SPARSE_INDICES {list(idx.shape)} and SPARSE_VALUES "
                           f"{list(val.shape)} for {len(texts)} texts; expected [{len(texts)}, width] each",
                           type_="server_error")
        widths = (idx >= 0).sum(axis=1).tolist()  # each row's active dimensions first, then the padding (-1)
        return [(ix[:n], v[:n]) for ix, v, n in zip(idx, val, widths)], tokens.reshape(-1)

    async def ready(self) -> dict[str, str]:
        """The pool must encode a text with finite weights; {pool: 'ok' | reason}."""
        try:
            vecs, _ = await self._frontdoor([PROBE], {})
            state = "ok" if all(np.all(np.isfinite(v)) for _, v in vecs) else "non-finite weight"
        except ApiError as exc:
            state = exc.message
        return {self.pool.name: state}

    def describe(self) -> dict:
        """This model's /v1/models entry."""
        s, o = self.served, self.served.options
        return {"id": s.name, "object": "model", "created": 0, "owned_by": "embtrt", "kind": self.kind.name,
                "embtrt": s.identity, "vocab_size": s.dim, "max_seq_length": s.max_len, "prompts": o.prompts,
                "default_prompt_name": o.default_prompt_name, "routes": ["/v1/sparse", "/embed_sparse"]}

