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

from ...errors import SpecError
from ...serve import wire
from .coalescer import PoolBatcher
from .config import GatewayConfig, Pool, model_pools
from .errors import ApiError
from .metrics import Metrics
from .served import Served
from .upstream import Upstream


class Gateway:
    """The gateway of one model (repository): routing, tokenizing, coalescing, pooling."""

    def __init__(self, cfg: GatewayConfig, repository: Path | None = None, metrics: Metrics | None = None,
                 upstream: Upstream | None = None, several: bool = False) -> None:
        self.cfg = cfg
        self.served = Served(repository or cfg.repository)
        name = self.served.name
        self.pools = model_pools(cfg, name, self.served.buckets, several)
        self.pool_of = {b: p for p in self.pools for b in p.buckets}
        self.metrics = metrics or Metrics()
        self.upstream = upstream or Upstream(cfg.attempts, cfg.timeout_s, self.metrics)
        # auto with one pool: the front door once a replica says it is ready (a pool server may load the bucket
        # models only, as `embtrt k8s` pools do); token ids until then, and for good with length pools
        self.route = cfg.route if cfg.route != "auto" or len(self.pools) == 1 else "ids"
        self._route_checked = -1e9
        # auto on one pool, once the front door is ready: while other requests are in flight, texts go to the front
        # door (its batching makes it the cheapest path per request under load); a request that arrives alone goes
        # the lowest-latency way, token ids to its buckets' encoders (measured at concurrency 1: benchmarks/README.md)
        self.adaptive = cfg.route == "auto" and len(self.pools) == 1
        self.active = 0  # this model's requests in embed()
        if self.route == "frontdoor" and len(self.pools) > 1:
            raise SpecError(f"--route frontdoor sends every text of {name} to its front door, but its buckets are "
                            f"in {len(self.pools)} pools", "use --route ids with length pools")
        self.batchers = {p.name: PoolBatcher(p.name, cfg.coalesce_us / 1e6, cfg.coalesce_inflight * len(p.urls),
                                             self._limit, self._coalesced)
                         for p in self.pools} if cfg.coalesce_us > 0 else {}

    def _limit(self, key) -> int:
        return self.served.max_batch_size if key[0] == "frontdoor" else self.served.max_batch[key[1]]

    async def _coalesced(self, key, rows: list) -> np.ndarray | tuple[np.ndarray, np.ndarray | None]:
        """One upstream call of coalesced rows: ("frontdoor", prompt_name, truncate) -> texts to the
        front door; ("ids", bucket) -> (ids, types, skip) rows to the bucket's encoder."""
        pool = self.pools[0] if key[0] == "frontdoor" else self.pool_of[key[1]]
        self.metrics.of(self.metrics.call_rows, pool.name, key[0]).observe(len(rows))
        if key[0] == "frontdoor":
            return await self._frontdoor(rows, key[1], key[2])
        return await self._rows(key[1], [r[0] for r in rows], [r[1] for r in rows],
                                np.fromiter((r[2] for r in rows), dtype=np.int64, count=len(rows)))

    def _prompt_parameter(self, opts) -> str | None:
        """The front door's prompt_name for these options: the prompt's name; for no prompt where the
        model has a default one, the name of an empty prompt (resolved options keep no name for one)."""
        o = self.served.options
        if opts.prompt:
            return opts.prompt_name
        if not o.default.prompt:
            return None
        return next(n for n, t in o.prompts.items() if t == "")

    async def _text_route(self) -> str:
        """The route of text input: --route, or for auto the front door once a replica of the (only) pool
        reports it ready; until then token ids, asking again at most every 5 s."""
        if self.route != "auto":
            return self.route
        now = time.monotonic()
        if now - self._route_checked < 5.0:
            return "ids"
        self._route_checked = now
        for url in self.pools[0].urls:
            try:
                if await self.upstream.client(url).is_model_ready(self.served.name):
                    self.route = "frontdoor"
                    return self.route
            except Exception:  # an unreachable replica: ask the next one
                continue
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
            if texts is not None and await self._text_route() == "frontdoor" and not (self.adaptive and self.active == 1):
                return await self._embed_frontdoor(texts, opts)
            return await self._embed_ids(texts, ids, opts)
        finally:
            self.active -= 1

    async def _embed_ids(self, texts: list[str] | None, ids: list[list[int]] | None, opts) -> tuple[np.ndarray, int]:
        """Token ids (the request's, or its texts' tokenized here) to the buckets' encoders (or, --route text,
        each bucket's rows as text to its NAME_<L> ensemble)."""
        s = self.served
        skip = 0
        if texts is not None:
            texts, enc, skip = self._encode(texts, opts)
        else:
            assert ids is not None
            enc = s.Encoded(ids, [[0] * len(x) for x in ids], np.array([len(x) for x in ids], dtype=np.int64))
        from embtrt_backend.routing import plan

        out = np.empty((enc.lengths.size, s.dim), dtype=np.float32)
        # length-sorted rows of each bucket in chunks as large as the bucket's max batch (the front door's routing)
        jobs = [self._chunk(s.buckets[b], rows, enc, texts if enc.owner is None else None, out, skip)
                for b, rows in plan(enc.lengths, s.buckets, [s.max_batch[b] for b in s.buckets], pad_to_bucket=True)]
        await asyncio.gather(*jobs)
        n = len(texts) if texts is not None else enc.lengths.size
        # --overflow chunk: rows are windows; each text gets the mean of its windows, as the front door does
        vecs = s.merge_windows(out, enc.owner, n, s.normalize)
        return s.options.finish(vecs, opts), int(enc.lengths.sum())

    def _encode(self, texts: list[str], opts) -> tuple[list[str], Any, int]:
        """Tokenize texts as the front door does (prompt first, the request's truncation) and refuse
        over-long ones where nothing may be cut -> (prompted texts, encoding, prompt tokens to leave
        out of pooling)."""
        s = self.served
        skip = 0
        if opts.prompt:
            texts = [opts.prompt + t for t in texts]
            skip = 0 if s.options.include_prompt else s.prompt_tokens[opts.prompt_name]
        enc = s.tok.encode_mixed(texts, [opts.truncate] * len(texts))
        if s.tok.refuses_long(opts.truncate):
            over = np.nonzero(enc.lengths > s.max_len)[0]
            if over.size:
                why = "truncate is NONE" if opts.truncate else "this model was built with --overflow reject"
                raise ApiError(400, f"input[{int(over[0])}] is longer than the max sequence length {s.max_len} "
                               f"tokens and {why}", param="input")
        return texts, enc, skip

    async def _embed_frontdoor(self, texts: list[str], opts) -> tuple[np.ndarray, int]:
        """Texts to the front door, which applies the prompt (a request parameter) and the truncation
        itself and reports each text's token count. The gateway tokenizes only to refuse over-long
        texts up front (truncate NONE), or for usage where the front door does not report it."""
        s = self.served
        counted = None
        if s.tok.refuses_long(opts.truncate) or not s.door_tokens:
            counted = int(self._encode(texts, opts)[1].lengths.sum())
        key = ("frontdoor", self._prompt_parameter(opts), opts.truncate)
        pool = self.pools[0]
        mb = s.max_batch_size  # the front door takes at most its max batch per call: larger requests in parts
        parts = [texts[i:i + mb] for i in range(0, len(texts), mb)]
        done: list[tuple[np.ndarray, np.ndarray | None]]
        if self.batchers:
            done = list(await asyncio.gather(*(self.batchers[pool.name].submit(key, p) for p in parts)))
        else:
            done = list(await asyncio.gather(*(self._frontdoor(p, key[1], key[2]) for p in parts)))
        vecs = done[0][0] if len(done) == 1 else np.concatenate([d[0] for d in done])
        if counted is None:
            counted = sum(int(d[1].sum()) for d in done if d[1] is not None)
        self.metrics.count(pool.name, len(texts), counted)
        return s.options.finish(vecs, opts), counted

    async def _chunk(self, bucket: int, rows, enc, texts, out: np.ndarray, skip: int = 0) -> None:
        s = self.served
        pool = self.pool_of[bucket]
        if self.route == "text" and texts is not None:
            inputs = [wire.text_input([texts[r] for r in rows])]
            vec = await self.upstream.call(pool, bucket, f"{s.name}_{bucket}", inputs, "EMBEDDING")
        else:  # token ids to the bucket's encoder: coalesced with other requests' rows, or alone
            ids, types = [enc.ids[r] for r in rows], [enc.type_ids[r] for r in rows]
            if self.batchers:
                vec = await self.batchers[pool.name].submit(("ids", bucket), list(zip(ids, types, [skip] * len(ids))))
            else:
                vec = await self._rows(bucket, ids, types, np.full(len(ids), skip, dtype=np.int64))
        out[rows] = vec
        self.metrics.count(pool.name, len(rows), int(enc.lengths[rows].sum()))

    async def _rows(self, bucket: int, ids: list[list[int]], types: list[list[int]], skip: np.ndarray) -> np.ndarray:
        """Token-id rows (of several requests) -> pooled vectors, by one call to the bucket's encoder."""
        s = self.served
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        enc = s.Encoded(ids, types, lengths)
        width = bucket if s.fixed_length else int(lengths.max())
        feeds = s.tok.pad(enc, np.arange(len(ids)), width, s.input_names)
        inputs = wire.int64_inputs(feeds, s.input_names)
        vec = await self.upstream.call(self.pool_of[bucket], bucket, f"{s.name}_{bucket}_encoder", inputs, s.output)
        if not s.fused:  # include_prompt false: the prompt's tokens are left out of pooling
            from embtrt_backend.pooling import exclude_prefix, pool_and_normalize

            vec = pool_and_normalize(vec, exclude_prefix(feeds["attention_mask"], skip), s.pooling, s.normalize)
        return vec

    async def ready(self) -> dict[str, str]:
        """Every pool must answer a real inference on its smallest bucket; {pool: 'ok' | reason}."""
        s = self.served
        enc = s.tok.encode(["embtrt readiness probe"])
        out: dict[str, str] = {}

        async def one(pool: Pool) -> None:
            b = min(pool.buckets)
            vec = np.empty((1, s.dim), dtype=np.float32)
            try:
                if self.route == "frontdoor":  # the model the requests use: the front door (auto: once it is ready)
                    vec = (await self._frontdoor(["embtrt readiness probe"], None, None))[0]
                else:
                    await self._chunk(b, np.array([0]), enc, ["embtrt readiness probe"], vec)
                out[pool.name] = "ok" if np.all(np.isfinite(vec)) else "non-finite vector"
            except ApiError as exc:
                out[pool.name] = exc.message

        await asyncio.gather(*(one(p) for p in self.pools))
        return out
