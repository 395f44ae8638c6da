"""The embedding algorithm of one model behind the gateway (`Gateway`): the route of each request
(its texts to the model's front door, or token ids tokenized here to its buckets' encoders, or with
--route text each bucket's texts to its NAME_<L> ensemble), the plan of rows into bucket chunks,
coalescing, pooling where the encoder does not, and the request's options applied to the vectors."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np

from embtrt_backend.core import Chunk
from embtrt_backend.kinds import EMBEDDER
from embtrt_backend.options import EMBEDDING_TYPES

from ...errors import SpecError
from ...serve import wire
from ...scale.gateway.coalescer import PoolBatcher
from ...scale.gateway.ops.embed import EmbeddingsModel, model_suffixes
from ...scale.gateway.config import GatewayConfig, Pool, model_pools
from ...scale.gateway.errors import ApiError
from ...scale.gateway.front_door import prepared
from ...scale.gateway.metrics import Metrics
from ...scale.gateway.admission import Admission, AdmissionConfig
from ...scale.gateway.served import Served
from ...scale.gateway.upstream import Upstream

# --route auto: a replica that answered "not ready" is asked again after this long; where none answered
# (the server busy or restarting: a failed ask is no answer), after this long
ROUTE_RECHECK_S = 5.0
ROUTE_RETRY_S = 0.25


class Gateway:
    """The gateway of one model (repository): routing, tokenizing, coalescing, pooling."""

    kind = EMBEDDER

    def __init__(self, cfg: GatewayConfig, repository: Path | None = None, metrics: Metrics | None = None,
                 upstream: Upstream | None = None, several: bool = False, admission: Admission | None = None) -> None:
        self.cfg = cfg
        self.admission = admission or Admission(AdmissionConfig())
        self.served = Served(repository or cfg.repository)
        name = self.served.name
        self.pools = model_pools(cfg, name, self.served.buckets, several)
        self.pool_of = {b: p for p in self.pools for b in p.buckets}
        self.metrics = metrics or Metrics()
        self.upstream = upstream or Upstream(cfg.attempts, cfg.timeout_s, self.metrics, tls_ca=cfg.pool_tls_ca)
        # auto with one pool: the front door once a replica says it is ready (a pool server may load the bucket
        # models only, as `embtrt k8s` pools do); token ids until then, and for good with length pools
        self.route = cfg.route if cfg.route != "auto" or len(self.pools) == 1 else "ids"
        self._route_next = -1e9   # --route auto: when the front door's readiness may be asked again
        # auto on one pool, once the front door is ready: while other requests are in flight, texts go to the front
        # door (its batching makes it the cheapest path per request under load); a request that arrives alone goes
        # the lowest-latency way, token ids to its buckets' encoders (measured at concurrency 1: benchmarks/README.md)
        self.adaptive = cfg.route == "auto" and len(self.pools) == 1
        self.active = 0  # this model's requests in embed()
        self._whole: Any = None   # late chunking's tokenizer (late_chunks), made on first use
        if self.route == "frontdoor" and len(self.pools) > 1:
            raise SpecError(f"--route frontdoor sends every text of {name} to its front door, but its buckets are "
                            f"in {len(self.pools)} pools", "use --route ids with length pools")
        self.batchers = {p.name: PoolBatcher(p.name, cfg.coalesce_us / 1e6, cfg.coalesce_inflight * len(p.urls),
                                             self._limit, self._coalesced)
                         for p in self.pools} if cfg.coalesce_us > 0 else {}
        s = self.served   # what parsing a request needs (registry.MultiGateway.schemas)
        self.schema = EmbeddingsModel(s.options, s.vocab_size, s.max_len, s.max_text_bytes, self.route, cfg.token_ids)

    def _limit(self, key) -> int:
        return self.served.max_batch_size if key[0] == "frontdoor" else self.served.max_batch[key[1]]

    async def _coalesced(self, key, rows: list) -> np.ndarray | tuple[np.ndarray, np.ndarray | None]:
        """One upstream call of coalesced rows: ("frontdoor", prompt_name, truncate) -> texts to the
        front door; ("ids", bucket) -> (ids, types, skip) rows to the bucket's encoder."""
        pool = self.pools[0] if key[0] == "frontdoor" else self.pool_of[key[1]]
        self.metrics.of(self.metrics.call_rows, pool.name, key[0]).observe(len(rows))
        if key[0] == "frontdoor":
            return await self._frontdoor(rows, key[1], key[2])
        return await self._rows(Chunk(key[1], np.arange(len(rows)), [r[0] for r in rows], [r[1] for r in rows],
                                      np.fromiter((r[2] for r in rows), dtype=np.int64, count=len(rows))))

    async def _text_route(self) -> str:
        """The route of text input: --route, or for auto the front door once a replica of the (only) pool
        reports it ready; until then token ids. A replica that answers "not ready" is asked again after
        ROUTE_RECHECK_S; where no replica answered at all (busy, restarting), the next request after
        ROUTE_RETRY_S asks again. One ask at a time: requests meanwhile take token ids."""
        if self.route != "auto":
            return self.route
        now = time.monotonic()
        if now < self._route_next:
            return "ids"
        self._route_next = now + ROUTE_RECHECK_S
        answered = False
        for url in self.pools[0].urls:
            try:
                ready = await self.upstream.client(url).is_model_ready(self.served.name)
            except Exception:  # an unreachable or overloaded replica: ask the next one
                continue
            answered = True
            if ready:
                self.route = "frontdoor"
                return self.route
        if not answered:
            self._route_next = time.monotonic() + ROUTE_RETRY_S
        return "ids"

    async def _frontdoor(self, texts: list[str], prompt_name: str | None,
                         truncate: str | None) -> tuple[np.ndarray, np.ndarray | None]:
        """Texts (of several requests, one prompt and truncation) -> (full-width float vectors, each
        text's token count or None where the front door does not report it), by one call to the model's
        front door, which tokenizes, routes to the buckets and batches itself."""
        inp = wire.text_input(texts)
        params = {k: v for k, v in (("prompt_name", prompt_name), ("truncate", truncate)) if v is not None}
        if not self.served.door_tokens:
            return await self.upstream.call(self.pools[0], 0, self.served.name, [inp], "EMBEDDING", params), None
        vecs, tokens = await self.upstream.calls(self.pools[0], 0, self.served.name, [inp], ("EMBEDDING", "TOKENS"), params)
        return vecs, tokens

    # ---- embedding ------------------------------------------------------------------------

    async def embed(self, texts: list[str] | None, ids: list[list[int]] | None, opts=None) -> tuple[np.ndarray, int]:
        """-> (vectors in input order, as the options ask, and the tokens embedded, prompts included)."""
        opts = opts if opts is not None else self.served.options.default
        self.active += 1
        try:
            if texts is not None:
                self.admission.check_chars(texts)
            if texts is not None and await self._text_route() == "frontdoor" and not (self.adaptive and self.active == 1):
                return await self._embed_frontdoor(texts, opts)
            return await self._embed_ids(texts, ids, opts)
        finally:
            self.active -= 1

    async def _prepare(self, texts: list[str] | None, ids: list[list[int]] | None, opts):
        """The request core's prepare as the gateway admits it (front_door.prepared); an over-long text
        refused (truncate NONE, or an --overflow reject build) says why; another refusal names its item
        ("row K: ..." -> input[K]: ...)."""
        s = self.served

        def too_long(err: Exception) -> ApiError | None:
            row = getattr(err, "row", None)
            if row is None or "is longer than the max sequence length" not in str(err):
                return None
            why = "truncate is NONE" if opts.truncate else "this model was built with --overflow reject"
            return ApiError(400, f"input[{row}] is longer than the max sequence length {s.max_len} tokens and {why}",
                            param="input")

        return await prepared(self.admission, s.core, texts, ids, opts, "input", too_long)

    async def _embed_ids(self, texts: list[str] | None, ids: list[list[int]] | None, opts) -> tuple[np.ndarray, int]:
        """Token ids (the request's, or its texts' tokenized here by the request core) to the buckets'
        encoders (or, --route text, each bucket's texts to its NAME_<L> ensemble)."""
        batch = await self._prepare(texts, ids, opts)
        windows = sum(len(c.ids) for c in batch.chunks) != len(texts or ids or ())
        bulk = len(batch.chunks) > 1
        vecs = await asyncio.gather(*(self._chunk(c, None if windows else texts, bulk) for c in batch.chunks))
        (out,) = batch.finish(list(vecs))
        assert out.vectors is not None and out.tokens is not None
        return out.vectors, int(out.tokens.sum())

    async def _embed_frontdoor(self, texts: list[str], opts) -> tuple[np.ndarray, int]:
        """Texts to the front door, which applies the prompt (a request parameter) and the truncation
        itself and reports each text's token count. The gateway tokenizes only to refuse over-long
        texts up front (truncate NONE), to count tokens for the cap when a cheap bound cannot prove the
        request under it, or for usage where the front door does not report it."""
        s = self.served
        counted = None
        cuts = not s.tok.refuses_long(opts.truncate)
        bound = self.admission.token_bound(texts, 2 + len(opts.prompt), s.max_len if cuts else None)
        if not cuts or not s.door_tokens or bound > self.admission.cfg.max_request_tokens:
            counted = sum(int(x) for c in (await self._prepare(texts, None, opts)).chunks for x in map(len, c.ids))
        key = ("frontdoor", opts.prompt_choice, opts.truncate)
        pool = self.pools[0]
        mb = s.max_batch_size  # the front door takes at most its max batch per call: larger requests in parts
        parts = [texts[i:i + mb] for i in range(0, len(texts), mb)]
        done: list[tuple[np.ndarray, np.ndarray | None]]
        if self.batchers:
            bulk = len(parts) > 1
            done = list(await asyncio.gather(*(self.batchers[pool.name].submit(key, p, bulk) for p in parts)))
        else:
            done = list(await asyncio.gather(*(self._frontdoor(p, key[1], key[2]) for p in parts)))
        vecs = done[0][0] if len(done) == 1 else np.concatenate([d[0] for d in done])
        if counted is None:
            counted = sum(int(d[1].sum()) for d in done if d[1] is not None)
        self.metrics.count(pool.name, len(texts), counted)
        return s.options.finish(vecs, opts), counted

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
        batch = await self._prepare(texts, ids, opts)
        n = len(texts or ids or ())
        if sum(len(c.ids) for c in batch.chunks) != n:
            raise ApiError(400, "a text over the max length would be several windows (--overflow chunk): token "
                           "embeddings are served per window of one text only; send truncate END or START",
                           param="truncate")
        rows: list[np.ndarray] = [np.empty(0)] * n

        async def one(c: Chunk) -> None:
            core = s.core
            feeds = core.feeds(c)
            out = await self.upstream.call(self.pool_of[c.bucket], c.bucket, f"{s.name}_{c.bucket}_encoder",
                                           wire.int64_inputs(feeds, core.cfg.input_names), s.output)
            mask = feeds["attention_mask"].astype(bool)
            for j, r in enumerate(c.rows.tolist()):
                rows[r] = np.ascontiguousarray(out[j][mask[j]], dtype=np.float32)
            self.metrics.count(self.pool_of[c.bucket].name, len(c.ids), sum(map(len, c.ids)))

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

    async def _chunk(self, c: Chunk, texts: list[str] | None, bulk: bool = False) -> np.ndarray:
        """One chunk of the plan upstream: as text to its bucket ensemble (--route text), or as token ids
        to its encoder, coalesced with other requests' rows or alone -> pooled vectors of its rows."""
        s = self.served
        pool = self.pool_of[c.bucket]
        if self.route == "text" and texts is not None:
            inputs = [wire.text_input([texts[r] for r in c.rows])]
            vec = await self.upstream.call(pool, c.bucket, f"{s.name}_{c.bucket}", inputs, "EMBEDDING")
        elif self.batchers:
            vec = await self.batchers[pool.name].submit(("ids", c.bucket), list(zip(c.ids, c.type_ids, c.skip.tolist())),
                                                        bulk)
        else:
            vec = await self._rows(c)
        self.metrics.count(pool.name, len(c.ids), sum(map(len, c.ids)))
        return vec

    async def _rows(self, c: Chunk) -> np.ndarray:
        """Token-id rows (of one or several requests) -> pooled vectors, by one call to the bucket's
        encoder, padded and pooled by the request core as the front door does."""
        core = self.served.core
        feeds = core.feeds(c)
        out = await self.upstream.call(self.pool_of[c.bucket], c.bucket, f"{self.served.name}_{c.bucket}_encoder",
                                       wire.int64_inputs(feeds, core.cfg.input_names), self.served.output)
        return core.pool(out, feeds, c.skip)

    async def ready(self) -> dict[str, str]:
        """Every pool must answer a real inference on its smallest bucket; {pool: 'ok' | reason}."""
        s = self.served
        out: dict[str, str] = {}
        probe = "embtrt readiness probe"

        async def one(pool: Pool) -> None:
            try:
                if self.route == "frontdoor":  # the model the requests use: the front door (auto: once it is ready)
                    vec = (await self._frontdoor([probe], None, None))[0]
                else:
                    ids = s.tok.encode([probe]).ids
                    b = min(pool.buckets)
                    vec = await self._rows(Chunk(b, np.arange(1), ids, [[0] * len(ids[0])], np.zeros(1, np.int64)))
                out[pool.name] = "ok" if np.all(np.isfinite(vec)) else "non-finite vector"
            except ApiError as exc:
                out[pool.name] = exc.message

        await asyncio.gather(*(one(p) for p in self.pools))
        return out

    def tei_type(self) -> dict:
        """TEI's /info model_type of this model."""
        return {"embedding": {"pooling": self.served.manifest.pooling}}

    @property
    def refused_operations(self) -> frozenset[str]:
        """Operations of its kind this build refuses: token vectors when its pooling is inside the graph."""
        return frozenset({"token_vectors"}) if self.served.core.cfg.fused else frozenset()

    def describe(self) -> dict:
        """This model's /v1/models entry: its kind, identity and request options."""
        o = self.served.options
        return {"id": self.served.name, "object": "model", "created": 0, "owned_by": "embtrt", "kind": self.kind.name,
                "embtrt": self.served.identity, "prompts": o.prompts, "default_prompt_name": o.default_prompt_name,
                "include_prompt": o.include_prompt, "dimensions": o.widths_text(), "embedding_types": list(EMBEDDING_TYPES),
                "aliases": [f"{self.served.name}-{x}" for x in model_suffixes(o)]}
