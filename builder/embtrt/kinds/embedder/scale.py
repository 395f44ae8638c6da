"""An embedder behind the gateway (`Embedder`): the one gateway model class, on its kind's length-pools routing
(scale/gateway/length_pools.py: texts to the model's front door, token ids to its buckets' encoders, or with
--route text each bucket's texts to its NAME_<L> ensemble), and what the pooled and token-vectors heads do with
what comes back: the request's options applied to the vectors, each token's vector, late chunking."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from embtrt_backend.core import Chunk
from embtrt_backend.kinds import EMBEDDER
from embtrt_backend.options import EMBEDDING_TYPES

from ...scale.gateway.errors import ApiError
from ...scale.gateway.length_pools import LengthPools
from ...scale.gateway.model import GatewayModel
from ...scale.gateway.ops.embed import EmbeddingsModel, model_suffixes
from ...scale.gateway.served import Served


class Embedder(GatewayModel):
    """The gateway of one embedder (repository): routing, tokenizing, coalescing, pooling."""

    kind, served_as = EMBEDDER, Served
    routing: LengthPools   # the embedder's routing part is length pools (Kind.routing)
    _whole: Any = None   # late chunking's tokenizer (late_chunks), made on first use

    @property
    def schema(self) -> EmbeddingsModel:
        """What parsing a request needs (registry.MultiGateway.schemas)."""
        s = self.served
        return EmbeddingsModel(s.options, s.vocab_size, s.max_len, s.max_text_bytes, self.route, self.cfg.token_ids)

    async def embed(self, texts: list[str] | None, ids: list[list[int]] | None, opts=None) -> tuple[np.ndarray, int]:
        """-> (vectors in input order, as the options ask, and the tokens embedded, prompts included)."""
        return await self.routing.vectors(texts, ids, opts if opts is not None else self.served.options.default)

    async def token_vectors(self, texts: list[str] | None, ids: list[list[int]] | None, opts) -> tuple[list[np.ndarray], int]:
        """-> (each input's token embeddings [its tokens, hidden], as SentenceTransformer.encode(output_value=
        "token_embeddings") gives them; the tokens). Needs encoders that return them (a --pooler python
        build: the default fused graph pools inside); each chunk goes to its bucket's encoder as token ids."""
        s = self.served
        if s.core.cfg.fused:
            raise ApiError(400, f"{s.name} was built with its pooling inside the graph (--pooler fused): its "
                           "encoders return pooled vectors only; rebuild it with --pooler python to serve token "
                           "embeddings", code="wrong_operation")
        if texts is not None:
            self.admission.check_chars(texts)
        batch = await self.routing.prepare(texts, ids, opts)
        n = len(texts or ids or ())
        if sum(len(c.ids) for c in batch.chunks) != n:
            raise ApiError(400, "a text over the max length would be several windows (--overflow chunk): token "
                           "embeddings are served per window of one text only; send truncate END or START",
                           param="truncate")
        rows: list[np.ndarray] = [np.empty(0)] * n

        async def one(c: Chunk) -> None:
            out, feeds = await self.routing.encoder(c)
            mask = feeds["attention_mask"].astype(bool)
            for j, r in enumerate(c.rows.tolist()):
                rows[r] = np.ascontiguousarray(out[j][mask[j]], dtype=np.float32)
            self.metrics.count(self.routing.pool_of[c.bucket].name, len(c.ids), sum(map(len, c.ids)))

        await asyncio.gather(*(one(c) for c in batch.chunks))
        return rows, int(sum(len(r) for r in rows))

    async def late_chunks(self, document: str, spans: list[tuple[int, int]], opts, field: str = "input") -> tuple[np.ndarray, int]:
        """-> (one vector per chunk span of `document`, pooled from its own tokens of one pass over the whole
        document, as the options ask; the document's tokens): late chunking (scale/gateway/ops/late.py)."""
        from embtrt_backend import InputError

        from ...scale.gateway.ops import late as lc

        s = self.served
        why = lc.refusal(s.core.cfg.pooling, s.core.cfg.fused)
        if why is not None:
            raise ApiError(400, f"{s.name}: {why}", param="late_chunking", code="wrong_operation" if s.core.cfg.fused else None)
        self.admission.check_chars([document])
        if self._whole is None:   # the model's tokenizer without truncation: the whole document, its offsets
            self._whole = lc.untruncated(s.tok.tok)
        size = len(document.encode("utf-8", "surrogatepass"))
        try:   # a long document off the event loop
            enc, owner = await self.admission.offload(size, lc.document_tokens, self._whole, document, spans, s.max_len,
                                                      lambda k: f"{field}[{k}]")
        except InputError as exc:
            raise ApiError(400, str(exc), param=field) from None
        (tokens,), used = await self.token_vectors(None, [list(enc.ids)], opts)
        vecs = await self.admission.offload(size, lc.pool, tokens, owner, len(spans), s.core.cfg.normalize)
        return s.options.finish(vecs, opts), used

    def tei_type(self) -> dict:
        """TEI's /info model_type of this model."""
        return {"embedding": {"pooling": self.served.manifest.pooling}}

    @property
    def refused_operations(self) -> frozenset[str]:
        """Operations of its kind this build refuses: token vectors when its pooling is inside the graph."""
        return frozenset({"token_vectors"}) if self.served.core.cfg.fused else frozenset()

    def facts(self) -> dict:
        """Its /v1/models entry's request options."""
        o = self.served.options
        return {"prompts": o.prompts, "default_prompt_name": o.default_prompt_name,
                "include_prompt": o.include_prompt, "dimensions": o.widths_text(), "embedding_types": list(EMBEDDING_TYPES),
                "aliases": [f"{self.served.name}-{x}" for x in model_suffixes(o)]}
