"""The length-pools routing (`LengthPools`), open to a text-input model whose served record carries the front
door's request core (served.Served): each request's route (its texts to the model's front door, or token ids,
tokenized here by that core, to its buckets' encoders, or with --route text each bucket's texts to its
NAME_<L> ensemble), the plan of rows into bucket chunks, coalescing, and the core's pooling where the encoder
does not pool. Its buckets may be in several pools (`embtrt k8s` length pools): then token ids, always."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
from embtrt_backend.core import Chunk

from ...errors import SpecError
from ...serve import wire
from .coalescer import PoolBatcher
from .config import Pool
from .errors import ApiError
from .front_door import prepared

# --route auto: a replica that answered "not ready" is asked again after this long; where none answered
# (the server busy or restarting: a failed ask is no answer), after this long
ROUTE_RECHECK_S = 5.0
ROUTE_RETRY_S = 0.25


class LengthPools:
    """A model's buckets in one or several pools: the route of each request, coalescing, and the calls."""

    def __init__(self, model: Any) -> None:
        self.model = m = model
        cfg, pools = m.cfg, m.pools
        self.pool_of = {b: p for p in pools for b in p.buckets}
        # auto with one pool: the front door once a replica says it is ready (a pool server may load the bucket
        # models only, as `embtrt k8s` pools do); token ids until then, and for good with length pools
        self.route = cfg.route if cfg.route != "auto" or len(pools) == 1 else "ids"
        self._route_next = -1e9   # --route auto: when the front door's readiness may be asked again
        # auto on one pool, once the front door is ready: while other requests are in flight, texts go to the front
        # door (its batching makes it the cheapest path per request under load); a request that arrives alone goes
        # the lowest-latency way, token ids to its buckets' encoders (measured at concurrency 1: benchmarks/README.md)
        self.adaptive = cfg.route == "auto" and len(pools) == 1
        self.active = 0  # the model's requests in vectors()
        if self.route == "frontdoor" and len(pools) > 1:
            raise SpecError(f"--route frontdoor sends every text of {m.served.name} to its front door, but its buckets "
                            f"are in {len(pools)} pools", "use --route ids with length pools")
        self.batchers = {p.name: PoolBatcher(p.name, cfg.coalesce_us / 1e6, cfg.coalesce_inflight * len(p.urls),
                                             self._limit, self._coalesced)
                         for p in pools} if cfg.coalesce_us > 0 else {}

    def _limit(self, key) -> int:
        s = self.model.served
        return s.max_batch_size if key[0] == "frontdoor" else s.max_batch[key[1]]

    async def _coalesced(self, key, rows: list) -> np.ndarray | tuple[np.ndarray, np.ndarray | None]:
        """One upstream call of coalesced rows: ("frontdoor", prompt_name, truncate) -> texts to the
        front door; ("ids", bucket) -> (ids, types, skip) rows to the bucket's encoder."""
        m = self.model
        pool = m.pool if key[0] == "frontdoor" else self.pool_of[key[1]]
        m.metrics.of(m.metrics.call_rows, pool.name, key[0]).observe(len(rows))
        if key[0] == "frontdoor":
            return await self._frontdoor(rows, key[1], key[2])
        return await self.rows(Chunk(key[1], np.arange(len(rows)), [r[0] for r in rows], [r[1] for r in rows],
                                     np.fromiter((r[2] for r in rows), dtype=np.int64, count=len(rows))))

    async def text_route(self) -> str:
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
        m = self.model
        for url in m.pool.urls:
            try:
                ready = await m.upstream.client(url).is_model_ready(m.served.name)
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
        m = self.model
        inp = wire.text_input(texts)
        params = {k: v for k, v in (("prompt_name", prompt_name), ("truncate", truncate)) if v is not None}
        if not m.served.door_tokens:
            return await m.upstream.call(m.pool, 0, m.served.name, [inp], "EMBEDDING", params), None
        vecs, tokens = await m.upstream.calls(m.pool, 0, m.served.name, [inp], ("EMBEDDING", "TOKENS"), params)
        return vecs, tokens

    async def vectors(self, texts: list[str] | None, ids: list[list[int]] | None, opts) -> tuple[np.ndarray, int]:
        """A request's texts or token ids -> (vectors in input order, as the options ask; the tokens embedded,
        prompts included), by the route of the moment."""
        self.active += 1
        try:
            if texts is not None:
                self.model.admission.check_chars(texts)
            if texts is not None and await self.text_route() == "frontdoor" and not (self.adaptive and self.active == 1):
                return await self._by_frontdoor(texts, opts)
            return await self._by_ids(texts, ids, opts)
        finally:
            self.active -= 1

    async def prepare(self, texts: list[str] | None, ids: list[list[int]] | None, opts):
        """The request core's prepare as the gateway admits it (front_door.prepared); an over-long text
        refused (truncate NONE, or an --overflow reject build) says why; another refusal names its item
        ("row K: ..." -> input[K]: ...)."""
        m = self.model
        s = m.served

        def too_long(err: Exception) -> ApiError | None:
            row = getattr(err, "row", None)
            if row is None or "is longer than the max sequence length" not in str(err):
                return None
            why = "truncate is NONE" if opts.truncate else "this model was built with --overflow reject"
            return ApiError(400, f"input[{row}] is longer than the max sequence length {s.max_len} tokens and {why}",
                            param="input")

        return await prepared(m.admission, s.core, texts, ids, opts, "input", too_long)

    async def _by_ids(self, texts: list[str] | None, ids: list[list[int]] | None, opts) -> tuple[np.ndarray, int]:
        """Token ids (the request's, or its texts' tokenized here by the request core) to the buckets'
        encoders (or, --route text, each bucket's texts to its NAME_<L> ensemble)."""
        batch = await self.prepare(texts, ids, opts)
        windows = sum(len(c.ids) for c in batch.chunks) != len(texts or ids or ())
        bulk = len(batch.chunks) > 1
        vecs = await asyncio.gather(*(self._chunk(c, None if windows else texts, bulk) for c in batch.chunks))
        (out,) = batch.finish(list(vecs))
        assert out.vectors is not None and out.tokens is not None
        return out.vectors, int(out.tokens.sum())

    async def _by_frontdoor(self, texts: list[str], opts) -> tuple[np.ndarray, int]:
        """Texts to the front door, which applies the prompt (a request parameter) and the truncation
        itself and reports each text's token count. The gateway tokenizes only to refuse over-long
        texts up front (truncate NONE), to count tokens for the cap when a cheap bound cannot prove the
        request under it, or for usage where the front door does not report it."""
        m = self.model
        s, admission = m.served, m.admission
        counted = None
        cuts = not s.tok.refuses_long(opts.truncate)
        bound = admission.token_bound(texts, 2 + len(opts.prompt), s.max_len if cuts else None)
        if not cuts or not s.door_tokens or bound > admission.cfg.max_request_tokens:
            counted = sum(int(x) for c in (await self.prepare(texts, None, opts)).chunks for x in map(len, c.ids))
        key = ("frontdoor", opts.prompt_choice, opts.truncate)
        pool = m.pool
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
        m.metrics.count(pool.name, len(texts), counted)
        return s.options.finish(vecs, opts), counted

    async def _chunk(self, c: Chunk, texts: list[str] | None, bulk: bool = False) -> np.ndarray:
        """One chunk of the plan upstream: as text to its bucket ensemble (--route text), or as token ids
        to its encoder, coalesced with other requests' rows or alone -> pooled vectors of its rows."""
        m = self.model
        pool = self.pool_of[c.bucket]
        if self.route == "text" and texts is not None:
            inputs = [wire.text_input([texts[r] for r in c.rows])]
            vec = await m.upstream.call(pool, c.bucket, f"{m.served.name}_{c.bucket}", inputs, "EMBEDDING")
        elif self.batchers:
            vec = await self.batchers[pool.name].submit(("ids", c.bucket), list(zip(c.ids, c.type_ids, c.skip.tolist())),
                                                        bulk)
        else:
            vec = await self.rows(c)
        m.metrics.count(pool.name, len(c.ids), sum(map(len, c.ids)))
        return vec

    async def encoder(self, c: Chunk) -> tuple[np.ndarray, dict]:
        """Token-id rows (of one or several requests) -> (the bucket's encoder output, the feeds it was given:
        padded by the request core as the front door pads), by one call."""
        m = self.model
        core = m.served.core
        feeds = core.feeds(c)
        out = await m.upstream.call(self.pool_of[c.bucket], c.bucket, f"{m.served.name}_{c.bucket}_encoder",
                                    wire.int64_inputs(feeds, core.cfg.input_names), m.served.output)
        return out, feeds

    async def rows(self, c: Chunk) -> np.ndarray:
        """Token-id rows -> pooled vectors, pooled by the request core as the front door pools."""
        out, feeds = await self.encoder(c)
        return self.model.served.core.pool(out, feeds, c.skip)

    async def ready(self) -> dict[str, str]:
        """Every pool must answer a real inference on its smallest bucket (the front door, where texts go
        there); {pool: 'ok' | reason}."""
        s = self.model.served
        out: dict[str, str] = {}
        probe = "embtrt readiness probe"

        async def one(pool: Pool) -> None:
            try:
                if self.route == "frontdoor":  # the model the requests use: the front door (auto: once it is ready)
                    vec = (await self._frontdoor([probe], None, None))[0]
                else:
                    ids = s.tok.encode([probe]).ids
                    b = min(pool.buckets)
                    vec = await self.rows(Chunk(b, np.arange(1), ids, [[0] * len(ids[0])], np.zeros(1, np.int64)))
                out[pool.name] = "ok" if np.all(np.isfinite(vec)) else "non-finite vector"
            except ApiError as exc:
                out[pool.name] = exc.message

        await asyncio.gather(*(one(p) for p in self.model.pools))
        return out
