"""The sparse encoding of one sparse encoder (SPLADE) behind the gateway (`Sparse`): a request's texts
to the model's front door, which prompts, tokenizes, truncates, encodes and keeps each text's active
dimensions itself (docs/sparse.md), in parts of at most its max batch sent concurrently; the vectors
back in input order, and the tokens the front door reports (TOKENS) as the usage.

Both API shapes (scale/gateway/dialects) come here as one `SparseRequest` (ops/sparse.py): one semantics behind
the routes."""

from __future__ import annotations

import numpy as np
from embtrt_backend.kinds import SPARSE

from ...serve import wire
from ...scale.gateway.errors import ApiError
from ...scale.gateway.front_door import prepared
from ...scale.gateway.model import GatewayModel
from ...scale.gateway.served import ServedSparse
from ...scale.gateway.dialects import INPUT_FIELDS
from ...scale.gateway.ops.sparse import SparseModel, SparseRequest

Vector = tuple[np.ndarray, np.ndarray]           # one text's (indices ascending, values)


class Sparse(GatewayModel):
    """The gateway of one sparse encoder (repository): a request's texts, encoded by its front door."""

    kind, does, value = SPARSE, "encodes every text", "weight"
    outputs, probe = ("SPARSE_INDICES", "SPARSE_VALUES", "TOKENS"), (None, ["embtrt readiness probe"])
    served_as = ServedSparse

    @property
    def schema(self) -> SparseModel:
        return SparseModel(self.served.options, self.served.max_text_bytes)

    async def encode(self, req: SparseRequest) -> tuple[list[Vector], int]:
        """-> (each text's active dimensions, in input order; the tokens encoded, as the front door counts them)."""
        field = INPUT_FIELDS[req.api]
        self.admission.check_count(sum(map(len, req.texts)), field)
        await self._check_tokens(req, field)
        parts, tokens = await self.send(req.texts, None, req.parameters, field)
        return [v for p in parts for v in p], tokens

    def inputs(self, texts: list[str], _how) -> list:
        return [wire.text_input(texts)]

    def unpack(self, texts: list[str], outs: tuple) -> list[Vector]:
        idx, val = outs
        if idx.ndim != 2 or idx.shape != val.shape or len(idx) != len(texts):
            raise ApiError(502, f"{self.served.name}'s front door answered SPARSE_INDICES {list(idx.shape)} and "
                           f"SPARSE_VALUES {list(val.shape)} for {len(texts)} texts; expected [{len(texts)}, width] each",
                           type_="server_error")
        widths = (idx >= 0).sum(axis=1).tolist()  # each row's active dimensions first, then the padding (-1)
        return [(ix[:n], v[:n]) for ix, v, n in zip(idx, val, widths)]

    def finite(self, rows: list[Vector]) -> bool:
        return all(np.all(np.isfinite(v)) for _, v in rows)

    async def _check_tokens(self, req: SparseRequest, field: str) -> None:
        """The token cap (--max-request-tokens): a text is at most the max length (cut, or refused by the
        front door with truncate NONE), and a token covers at least one UTF-8 byte; where that bound does
        not prove the request under the cap, the texts are prepared by the front door's own request core
        here (prompt, tokenize; off the loop) and counted."""
        s, cap, opts = self.served, self.admission.cfg.max_request_tokens, req.options
        bound = self.admission.token_bound(req.texts, 4 + 4 * len(opts.prompt), s.max_len)
        if bound <= cap:
            return
        await prepared(self.admission, s.core, req.texts, None, opts, field)

    def tei_type(self) -> dict:
        """TEI's /info model_type: an embedding model of SPLADE pooling."""
        return {"embedding": {"pooling": "splade"}}

    def facts(self) -> dict:
        s, o = self.served, self.served.options
        return {"vocab_size": s.dim, "max_seq_length": s.max_len, "prompts": o.prompts,
                "default_prompt_name": o.default_prompt_name}
