"""`embtrt gateway`: OpenAI's /v1/embeddings in front of length pools of tritonservers.

Every input is tokenized here with the served tokenizer.json, so token counts are exact
(usage, routing) and over-long texts are refused up front. Where all of a model's buckets
are in one pool (one server, or replicas of it), texts go to the model's front door
(`--route frontdoor`, the default there): it tokenizes, routes and batches as a direct
call does, and the gateway adds only its HTTP work (measured in benchmarks/README.md).
With length pools each item goes to the pool of the smallest bucket that holds it, as
token ids to that bucket's encoder (`--route ids`; `--route text` sends text to the
`NAME_<L>` ensembles instead). Rows of concurrent requests are coalesced into one upstream
call, round robin over a pool's replicas, retried on another replica when one is
unavailable or its queue is full. Results come back in input order.

Token-id input (`input` as a list of ints, or of lists of ints) takes the model's own ids
as its tokenizer.json produces them, special tokens included, and must fit the max length.
"""


import asyncio
import base64
import gc
import hmac
import itertools
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SpecError
from ..repository.manifest import read_manifest

MAX_ITEMS = 2048
ROUTES = ("auto", "frontdoor", "ids", "text")
RETRYABLE_HINTS = ("Exceeds maximum queue size", "failed to connect", "Stub process", "is not healthy",
                   "Socket closed", "Connection reset", "connection refused", "unavailable")


class ApiError(Exception):
    """An error answered in OpenAI's envelope with its HTTP status."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class GatewayConfig:
    repository: Path
    triton: str | None = None
    # (bucket, urls), or (model, bucket, urls) for one model of several repositories
    pools: tuple[tuple, ...] = ()
    more_repositories: tuple[Path, ...] = ()               # further models behind the same gateway
    api_key: str | None = None
    # auto: frontdoor when all of a model's buckets are in one pool, else ids
    route: str = "auto"                                    # auto | frontdoor | ids | text
    max_items: int = MAX_ITEMS
    max_body_bytes: int = 16 << 20
    attempts: int = 4
    timeout_s: float = 60.0
    # Coalescing (route ids): rows of concurrent requests for one bucket go upstream as one call, at
    # most `coalesce_inflight` calls per replica in flight per pool; a call goes out at once while a
    # slot is free (a lone request never waits); a row waits at most `coalesce_us` for a slot.
    # 0 disables coalescing.
    coalesce_us: int = 2000
    coalesce_inflight: int = 2

    def __post_init__(self) -> None:
        if self.route not in ROUTES:
            raise SpecError(f"invalid route: {self.route!r}", " | ".join(ROUTES))
        if not 1 <= self.max_items <= MAX_ITEMS:
            raise SpecError(f"invalid max_items: {self.max_items}", f"1 .. {MAX_ITEMS}")
        if not 0 <= self.coalesce_us <= 1_000_000:
            raise SpecError(f"invalid coalesce_us: {self.coalesce_us}", "0 (off) .. 1000000")
        if not 1 <= self.coalesce_inflight <= 64:
            raise SpecError(f"invalid coalesce_inflight: {self.coalesce_inflight}", "1 .. 64")


def parse_pool(text: str) -> tuple:
    """'256=host:8001,host2:8001' -> (256, ('host:8001', 'host2:8001')); 'MODEL:256=host:8001' ->
    ('MODEL', 256, ('host:8001',)) for one model of several repositories."""
    head, sep, urls = text.partition("=")
    model, colon, bucket = head.rpartition(":") if ":" in head else ("", "", head)
    try:
        b = int(bucket)
    except ValueError:
        b = -1
    addrs = tuple(u.strip() for u in urls.split(",") if u.strip())
    if not sep or b < 1 or not addrs or (colon and not model):
        raise SpecError(f"invalid --pool {text!r}", "[MODEL:]BUCKET=HOST:PORT[,HOST:PORT...], e.g. 256=10.0.0.5:8001")
    return (model, b, addrs) if model else (b, addrs)


@dataclass
class Pool:
    name: str
    buckets: tuple[int, ...]
    urls: tuple[str, ...]
    _rr: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._rr = itertools.cycle(range(len(self.urls)))

    def order(self) -> list[str]:
        """This call's replica order: round robin start, then the others."""
        start = next(self._rr)
        return [self.urls[(start + i) % len(self.urls)] for i in range(len(self.urls))]


class Served:
    """What the gateway needs to know of the repository it fronts."""

    def __init__(self, repo: Path) -> None:
        repo = Path(repo)
        m = read_manifest(repo)
        self.manifest = m
        self.name: str = m.name
        self.dim = m.dim
        self.buckets = list(m.buckets)
        self.max_len = m.max_seq_length
        self.overflow = m.overflow
        self.input_names = m.input_names
        self.output = m.encoder_output
        self.fused = m.pooler == "fused"
        self.pooling, self.normalize = m.pooling, m.normalize
        self.fixed_length = m.target == "tensorrt"    # engines have the sequence fixed at the bucket
        self.max_batch = {b: m.bucket_batch(b) for b in self.buckets}
        self.max_batch_size = m.max_batch_size         # the front door's
        from ..repository.config import parse_config

        door_cfg = parse_config(repo / self.name / "config.pbtxt")
        door = door_cfg.parameters
        # the front door reports each text's token count (repositories built before it did not): usage without
        # tokenizing here
        self.door_tokens = any(o.name == "TOKENS" for o in door_cfg.output)
        # the front door refuses longer texts (never cut by bytes); the gateway does so up front on every route
        self.max_text_bytes = int(door["max_text_bytes"].string_value) if "max_text_bytes" in door else 1 << 20
        self.identity = dict(m.identity)
        from ..common.backend import backend_lib

        text_mod, _ = backend_lib()
        self.tok = text_mod.TextTokenizer(str(repo / self.name / "1" / "tokenizer.json"), self.max_len, m.pad_id,
                                          self.overflow, m.overflow_stride)
        self.merge_windows, self.Encoded = text_mod.merge_windows, text_mod.Encoded
        self.vocab_size = self.tok.tok.get_vocab_size(with_added_tokens=True)
        from embtrt_backend.options import ModelOptions, load_calibration, prompt_length

        self.options = ModelOptions(dim=m.dim, normalize=m.normalize, prompts=dict(m.prompts),
                                    default_prompt_name=m.default_prompt_name, include_prompt=m.include_prompt,
                                    allowed_dimensions=m.dimensions, calibration=load_calibration(str(repo / self.name / "1")))
        self.prompt_tokens = {n: prompt_length(self.tok.tok, t) for n, t in self.options.prompts.items()}


class Metrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter("embtrt_gateway_requests", "HTTP requests by route and status", ["route", "status"],
                                registry=self.registry)
        self.items = Counter("embtrt_gateway_items", "Items embedded, per pool", ["pool"], registry=self.registry)
        self.tokens = Counter("embtrt_gateway_tokens", "Tokens embedded, per pool", ["pool"], registry=self.registry)
        self.errors = Counter("embtrt_gateway_errors", "Error responses by status", ["status"], registry=self.registry)
        self.model_requests = Counter("embtrt_gateway_model_requests", "Embedding requests per model and status",
                                      ["model", "status"], registry=self.registry)
        self.retries = Counter("embtrt_gateway_upstream_retries", "Upstream calls retried on another replica",
                               ["pool", "reason"], registry=self.registry)
        buckets = (.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10)
        self.latency = Histogram("embtrt_gateway_request_seconds", "Latency of /v1/embeddings", buckets=buckets,
                                 registry=self.registry)
        self.upstream = Histogram("embtrt_gateway_upstream_seconds", "Latency of one upstream call, per pool", ["pool"],
                                  buckets=buckets, registry=self.registry)
        self.call_rows = Histogram("embtrt_gateway_upstream_rows",
                                   "Rows per coalesced upstream call, per pool and route (frontdoor, ids)",
                                   ["pool", "route"], buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=self.registry)
        self._children: dict[tuple, Any] = {}

    def of(self, metric, *labels):
        """metric.labels(*labels), kept: labels() takes a lock and builds its key on every call, and the hot
        path asks for the same few children on every request."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def count(self, pool: str, items: int, tokens: int) -> None:
        self.of(self.items, pool).inc(items)
        self.of(self.tokens, pool).inc(tokens)


@dataclass
class _Part:
    """One request's rows for one upstream call key (a bucket, or the front door with one option
    set), waiting to go upstream with other requests' rows."""

    rows: list
    fut: asyncio.Future
    since: float


class PoolBatcher:
    """Coalesces the rows that concurrent requests send to one pool into upstream calls, one key
    (a bucket's encoder, or the front door with one prompt / truncation) per call and at most the
    key's max batch, and scatters the vectors back to each request in order. At most `max_inflight`
    calls are in flight for the pool (the encoders' instances, so that they are not
    oversubscribed): a call goes out at once while a slot is free (a lone request never waits);
    when one frees, the key whose rows have waited longest goes next. A row waits at most
    `window_s` for a slot; after that its key goes out anyway. A call's failure fails the requests
    in it, never those of other calls, and a call of several requests refused as a bad request is
    retried one request per call, so that only the request at fault fails; a request whose client
    went away is dropped from calls not yet sent.

    `limit(key)`: the most rows of one call; `call(key, rows)`: one upstream call -> one array per row
    (vectors), or a tuple of such arrays (vectors and token counts)."""

    def __init__(self, name: str, window_s: float, max_inflight: int, limit, call) -> None:
        self.name, self.limit, self.call = name, limit, call
        self.window_s, self.max_inflight = window_s, max_inflight
        self.pending: dict[Any, list[_Part]] = {}
        self.inflight = 0
        self.calls = 0
        self.timer: asyncio.TimerHandle | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # the submitting loop (get_running_loop costs a getpid)

    async def submit(self, key, rows: list) -> Any:
        loop = self.loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.pending.setdefault(key, []).append(_Part(rows, fut, loop.time()))
        self._dispatch()
        return await fut

    def _oldest(self):
        waiting = [(parts[0].since, i, k) for i, (k, parts) in enumerate(self.pending.items()) if parts]
        return min(waiting)[2] if waiting else None

    def _dispatch(self) -> None:
        loop = self.loop
        assert loop is not None
        for k in list(self.pending):
            live = [p for p in self.pending[k] if not p.fut.done()]  # clients that went away
            if live:
                self.pending[k] = live
            else:
                del self.pending[k]
        now = loop.time()
        while True:
            nxt = self._oldest()
            if nxt is None:
                break
            overdue = now - self.pending[nxt][0].since >= self.window_s
            if self.inflight >= self.max_inflight and not overdue:
                break
            self._send(nxt)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        first = self._oldest()
        if first is not None:  # slots are busy: wake up when the oldest row has waited long enough
            delay = max(0.0, self.pending[first][0].since + self.window_s - now)
            self.timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self.timer = None
        self._dispatch()

    def _send(self, key) -> None:
        queue = self.pending[key]
        limit = self.limit(key)
        take: list[_Part] = []
        n = 0
        while queue and (not take or n + len(queue[0].rows) <= limit):
            part = queue.pop(0)
            take.append(part)
            n += len(part.rows)
        if not queue:
            del self.pending[key]
        self.inflight += 1
        assert self.loop is not None
        self.loop.create_task(self._run(key, take))

    async def _run(self, key, parts: list[_Part]) -> None:
        try:
            try:
                self.calls += 1
                vecs: list = [await self.call(key, [r for p in parts for r in p.rows])]
                groups = [parts]
            except ApiError as exc:
                if exc.status != 400 or len(parts) < 2:
                    raise
                groups = [[p] for p in parts]  # one bad request among several: find it, serve the others
                vecs = []
                for p in parts:
                    try:
                        self.calls += 1
                        vecs.append(await self.call(key, p.rows))
                    except ApiError as one:
                        vecs.append(one)
            for group, vec in zip(groups, vecs):
                start = 0
                for p in group:
                    if not p.fut.done():
                        if isinstance(vec, Exception):
                            p.fut.set_exception(vec)
                        else:
                            p.fut.set_result(_rows_of(vec, start, start + len(p.rows)))
                    start += len(p.rows)
        except Exception as exc:  # ApiError from the pool, or a bug: each request in this call gets it
            for p in parts:
                if not p.fut.done():
                    p.fut.set_exception(exc)
        finally:
            self.inflight -= 1
            self._dispatch()


def _rows_of(result, start: int, end: int):
    """Rows [start, end) of an upstream result: an array, or a tuple of arrays (or None) with one row per item."""
    if isinstance(result, tuple):
        return tuple(None if x is None else x[start:end] for x in result)
    return result[start:end]


class Gateway:
    """The gateway of one model (repository): parsing, routing, coalescing, upstream calls."""

    def __init__(self, cfg: GatewayConfig, repository: Path | None = None, metrics: "Metrics | None" = None,
                 clients: dict | None = None, several: bool = False) -> None:
        self.cfg = cfg
        self.served = Served(repository or cfg.repository)
        name = self.served.name
        # a plain --pool BUCKET=... applies to every model that has that bucket (to the only model: all of
        # them must be its buckets); MODEL:BUCKET=... to that model
        plain = {e[0]: e[1] for e in cfg.pools if len(e) == 2 and (not several or e[0] in self.served.buckets)}
        explicit = {**plain, **{e[1]: e[2] for e in cfg.pools if len(e) == 3 and e[0] == name}}
        unknown = sorted(set(explicit) - set(self.served.buckets))
        if unknown:
            raise SpecError(f"invalid --pool: buckets {unknown} are not buckets of {self.served.name}",
                            f"its buckets: {','.join(map(str, self.served.buckets))}")
        by_urls: dict[tuple[str, ...], list[int]] = {}
        for b in self.served.buckets:
            urls = explicit.get(b) or ((cfg.triton,) if cfg.triton else None)
            if not urls:
                raise SpecError(f"bucket {b} of {self.served.name} has no pool",
                                f"pass --pool {b}=HOST:PORT or --triton HOST:PORT for every bucket without a pool")
            by_urls.setdefault(tuple(urls), []).append(b)
        self.pools = [Pool(f"<={max(bs)}" if len(by_urls) > 1 else "all", tuple(bs), urls) for urls, bs in by_urls.items()]
        self.pool_of = {b: p for p in self.pools for b in p.buckets}
        self.metrics = metrics or Metrics()
        self._clients: dict[str, Any] = clients if clients is not None else {}
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
                                             self._limit, self._upstream)
                         for p in self.pools} if cfg.coalesce_us > 0 else {}

    def _limit(self, key) -> int:
        return self.served.max_batch_size if key[0] == "frontdoor" else self.served.max_batch[key[1]]

    async def _upstream(self, key, rows: list) -> "np.ndarray | tuple[np.ndarray, np.ndarray | None]":
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
                if await self.client(url).is_model_ready(self.served.name):
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
        import tritonclient.grpc.aio as aioclient

        arr = np.array([[t.encode("utf-8")] for t in texts], dtype=object)
        inp = aioclient.InferInput("TEXT", list(arr.shape), "BYTES")
        inp.set_data_from_numpy(arr)
        params = {k: v for k, v in (("prompt_name", prompt_name), ("truncate", truncate)) if v is not None}
        if not self.served.door_tokens:
            return await self._call(self.pools[0], 0, self.served.name, [inp], "EMBEDDING", params), None
        vecs, tokens = await self._calls(self.pools[0], 0, self.served.name, [inp], ("EMBEDDING", "TOKENS"), params)
        return vecs, tokens

    def client(self, url: str):
        c = self._clients.get(url)
        if c is None:
            import tritonclient.grpc.aio as aioclient

            c = self._clients[url] = aioclient.InferenceServerClient(url)
        return c

    # ---- request parsing ------------------------------------------------------------------

    def model_options(self, model: str) -> dict:
        """The served name, or NAME-query / NAME-passage / NAME-document (input_type) or
        NAME-<prompt> (prompt_name), for OpenAI clients that send no extra fields."""
        name = self.served.name
        if model == name:
            return {}
        if model.startswith(name + "-"):
            suffix = model[len(name) + 1:]
            if suffix in ("query", "passage", "document"):
                return {"input_type": suffix}
            if suffix in self.served.options.prompts:
                return {"prompt_name": suffix}
        raise ApiError(404, f"the model {model!r} does not exist; this gateway serves {name!r} (also as "
                       + ", ".join(f"{name}-{x}" for x in self.model_suffixes()) + ")",
                       param="model", code="model_not_found")

    def model_suffixes(self) -> list[str]:
        o = self.served.options
        out = [t for t in ("query", "passage", "document") if any(n in o.prompts for n in ("passage", "document"))
               or t == "query"] if o.prompts else []
        return sorted(set(out) | set(o.prompts)) if o.prompts else []

    def parse(self, body: dict, raw: dict | None = None) -> tuple[list[str] | None, list[list[int]] | None, str, object]:
        """-> (texts or None, token lists or None, encoding_format, RequestOptions). `raw`: the options
        the model name carried (NAME-query ...), when the caller resolved it."""
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        model = body.get("model")
        if model is None:
            raise ApiError(400, "you must provide a model parameter", param="model")
        if not isinstance(model, str):
            raise ApiError(400, "model must be a string", param="model")
        raw = dict(raw) if raw is not None else self.model_options(model)
        fmt = body.get("encoding_format", "float")
        if fmt not in ("float", "base64"):
            raise ApiError(400, f"encoding_format must be 'float' or 'base64', not {fmt!r}", param="encoding_format")
        from embtrt_backend import InputError
        from embtrt_backend.options import OPTION_NAMES

        for key in OPTION_NAMES:
            if body.get(key) is not None:
                if key in raw and raw[key] != body[key]:
                    raise ApiError(400, f"{key} {body[key]!r} disagrees with the model name {model!r}", param=key)
                raw[key] = body[key]
        if isinstance(raw.get("dimensions"), float) or isinstance(raw.get("dimensions"), str):
            raise ApiError(400, f"dimensions must be an integer, got {raw['dimensions']!r}", param="dimensions")
        try:
            opts = self.served.options.resolve(raw)
        except InputError as exc:
            raise ApiError(400, str(exc), param=exc.param) from None
        if self.route == "text" and (opts.prompt_name != self.served.options.default.prompt_name or opts.truncate):
            raise ApiError(400, "this gateway sends text to the bucket ensembles (--route text), which apply the "
                           "model's default prompt and truncation only; run it with --route ids for "
                           "prompt_name / input_type / truncate", param="prompt_name" if opts.prompt else "truncate")
        dims = opts
        if "input" not in body:
            raise ApiError(400, "you must provide an input parameter", param="input")
        inp = body["input"]
        if isinstance(inp, str):
            self._check_bytes([inp])
            return [inp], None, fmt, dims
        if not isinstance(inp, list) or not inp:
            raise ApiError(400, "input must be a string, a non-empty list of strings, a list of token ids or a list "
                           "of token-id lists", param="input")
        if len(inp) > self.cfg.max_items:
            raise ApiError(400, f"input has {len(inp)} items; at most {self.cfg.max_items} per request", param="input")
        if all(isinstance(x, str) for x in inp):
            self._check_bytes(inp)
            return list(inp), None, fmt, dims
        explicit_prompt = any(raw.get(k) is not None for k in ("prompt_name", "input_type"))
        if explicit_prompt and opts.prompt and (all(_is_int(x) for x in inp) or all(isinstance(x, list) for x in inp)):
            raise ApiError(400, "token-id input is embedded as given: a prompt (prompt_name / input_type) applies "
                           "to text input only", param="input")
        if all(_is_int(x) for x in inp):
            return None, [self._ids(inp, 0)], fmt, dims
        if all(isinstance(x, list) for x in inp):
            return None, [self._ids(x, i) for i, x in enumerate(inp)], fmt, dims
        raise ApiError(400, "input items must all be strings, all token ids, or all token-id lists", param="input")

    def _check_bytes(self, texts: list[str]) -> None:
        limit = self.served.max_text_bytes
        for i, t in enumerate(texts):
            if len(t) * 4 > limit and len(t.encode("utf-8")) > limit:  # len(t) * 4 bounds its UTF-8 size
                raise ApiError(400, f"input[{i}] is {len(t.encode('utf-8'))} bytes of UTF-8, over the limit of "
                               f"{limit} bytes per text", param="input")

    def _ids(self, ids: list, i: int) -> list[int]:
        if not ids or not all(_is_int(t) for t in ids):
            raise ApiError(400, f"input[{i}] must be a non-empty list of integer token ids", param="input")
        bad = [t for t in ids if not 0 <= t < self.served.vocab_size]
        if bad:
            raise ApiError(400, f"input[{i}]: token id {bad[0]} is outside the vocabulary (0..{self.served.vocab_size - 1})",
                           param="input")
        if len(ids) > self.served.max_len:
            raise ApiError(400, f"input[{i}] has {len(ids)} tokens; {self.served.name} takes at most "
                           f"{self.served.max_len} (token-id input is never truncated)", param="input")
        return [int(t) for t in ids]

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
            import tritonclient.grpc.aio as aioclient

            arr = np.array([[texts[r].encode("utf-8")] for r in rows], dtype=object)
            inputs = [aioclient.InferInput("TEXT", list(arr.shape), "BYTES")]
            inputs[0].set_data_from_numpy(arr)
            vec = await self._call(pool, bucket, f"{s.name}_{bucket}", inputs, "EMBEDDING")
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
        import tritonclient.grpc.aio as aioclient

        s = self.served
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        enc = s.Encoded(ids, types, lengths)
        width = bucket if s.fixed_length else int(lengths.max())
        feeds = s.tok.pad(enc, np.arange(len(ids)), width, s.input_names)
        inputs = []
        for n in s.input_names:
            t = aioclient.InferInput(n, list(feeds[n].shape), "INT64")
            t.set_data_from_numpy(feeds[n])
            inputs.append(t)
        vec = await self._call(self.pool_of[bucket], bucket, f"{s.name}_{bucket}_encoder", inputs, s.output)
        if not s.fused:  # include_prompt false: the prompt's tokens are left out of pooling
            from embtrt_backend.pooling import exclude_prefix, pool_and_normalize

            vec = pool_and_normalize(vec, exclude_prefix(feeds["attention_mask"], skip), s.pooling, s.normalize)
        return vec

    async def _call(self, pool: Pool, bucket: int, model: str, inputs, output: str,
                    parameters: dict | None = None) -> np.ndarray:
        """One upstream call, retried on other replicas -> its output."""
        return (await self._calls(pool, bucket, model, inputs, (output,), parameters))[0]

    async def _calls(self, pool: Pool, bucket: int, model: str, inputs, names: tuple[str, ...],
                     parameters: dict | None = None) -> tuple[np.ndarray, ...]:
        """One upstream call, retried on other replicas -> the outputs asked for, in order."""
        import tritonclient.grpc.aio as aioclient

        last, reasons = "", set()
        delay = 0.02
        for _attempt in range(self.cfg.attempts):
            for url in pool.order():
                t0 = time.perf_counter()
                try:
                    r = await self.client(url).infer(model, inputs,
                                                     outputs=[aioclient.InferRequestedOutput(n) for n in names],
                                                     client_timeout=self.cfg.timeout_s, parameters=parameters)
                    self.metrics.of(self.metrics.upstream, pool.name).observe(time.perf_counter() - t0)
                    return tuple(r.as_numpy(n) for n in names)
                except Exception as exc:  # InferenceServerException or a transport error: classify it
                    msg = str(exc)
                    kind = _classify(exc)
                    if kind == "bad":
                        raise ApiError(400, f"{model}: {msg}", param="input") from None
                    reasons.add(kind)
                    last = f"{url}: {msg[:300]}"
                    self.metrics.retries.labels(pool.name, kind).inc()
            await asyncio.sleep(delay * (0.5 + np.random.random()))
            delay = min(delay * 2, 1.0)
        if reasons == {"queue_full"}:
            raise ApiError(429, f"every replica of pool {pool.name} (bucket {bucket}) has a full queue; retry later ({last})",
                           type_="rate_limit_error", code="queue_full")
        raise ApiError(503, f"pool {pool.name} (bucket {bucket}, {', '.join(pool.urls)}) is unavailable: {last}",
                       type_="service_unavailable", code="pool_unavailable")

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


class MultiGateway:
    """Several models (repositories) behind one gateway: `model` picks one (or NAME-query ...);
    upstream clients and metrics are shared; unknown names are 404."""

    def __init__(self, cfg: GatewayConfig) -> None:
        self.metrics = Metrics()
        self._clients: dict[str, Any] = {}
        repos = (cfg.repository, *cfg.more_repositories)
        self.models: dict[str, Gateway] = {}
        for repo in repos:
            g = Gateway(cfg, repo, self.metrics, self._clients, several=len(repos) > 1)
            if g.served.name in self.models:
                raise SpecError(f"two repositories serve a model named {g.served.name!r} ({repo})",
                                "build one of them with another --name")
            self.models[g.served.name] = g
        named = {e[0] for e in cfg.pools if len(e) == 3}
        if named - set(self.models):
            raise SpecError(f"invalid --pool: no model named {', '.join(sorted(named - set(self.models)))}",
                            f"models: {', '.join(self.models)}")
        self.several = len(self.models) > 1

    @property
    def first(self) -> Gateway:
        return next(iter(self.models.values()))

    def resolve(self, model: object) -> tuple[Gateway, dict]:
        if model is None:
            raise ApiError(400, "you must provide a model parameter", param="model")
        if not isinstance(model, str):
            raise ApiError(400, "model must be a string", param="model")
        if model in self.models:
            return self.models[model], {}
        for name, g in self.models.items():
            if model.startswith(name + "-"):
                try:
                    return g, g.model_options(model)
                except ApiError:
                    continue
        names = ", ".join(f"{n!r}" for n in self.models)
        aliases = [f"{n}-{x}" for n, g in self.models.items() for x in g.model_suffixes()]
        raise ApiError(404, f"the model {model!r} does not exist; this gateway serves {names}"
                       + (f" (also as {', '.join(aliases)})" if aliases else ""), param="model", code="model_not_found")

    async def close(self) -> None:
        for c in self._clients.values():
            await c.close()
        self._clients.clear()

    async def ready(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, g in self.models.items():
            for pool, state in (await g.ready()).items():
                out[f"{name}/{pool}" if self.several else pool] = state
        return out

    def describe(self) -> list[dict]:
        """/v1/models entries: each model with its identity and request options."""
        out = []
        for g in self.models.values():
            o = g.served.options
            out.append({"id": g.served.name, "object": "model", "created": 0, "owned_by": "embtrt",
                        "embtrt": g.served.identity, "prompts": o.prompts, "default_prompt_name": o.default_prompt_name,
                        "include_prompt": o.include_prompt, "dimensions": o.widths_text(),
                        "embedding_types": ["float", "int8", "uint8", "binary", "ubinary"],
                        "aliases": [f"{g.served.name}-{x}" for x in g.model_suffixes()]})
        return out


def _loads(raw: bytes):
    try:
        import orjson
    except ImportError:
        return json.loads(raw)
    return orjson.loads(raw)


def _dumps(doc: dict) -> bytes:
    """JSON bytes; numpy arrays as lists (orjson serializes them natively, far cheaper than tolist())."""
    try:
        import orjson
    except ImportError:
        return json.dumps(doc, default=lambda a: a.tolist()).encode()
    return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)


async def _within(seconds: float, coro):
    """await coro, cancelled after `seconds` (asyncio.TimeoutError): asyncio.timeout where there is one
    (Python 3.11), which runs the coroutine in the caller's task; wait_for makes a task per request."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await coro
    return await asyncio.wait_for(coro, seconds)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _classify(exc: Exception) -> str:
    status = str(getattr(exc, "status", lambda: "")() or "")
    msg = str(exc)
    if "maximum queue size" in msg or "RESOURCE_EXHAUSTED" in status:
        return "queue_full"
    if "UNAVAILABLE" in status or "DEADLINE_EXCEEDED" in status or any(h in msg for h in RETRYABLE_HINTS):
        return "unavailable"
    if "unknown model" in msg or "is not ready" in msg or "NOT_FOUND" in status:
        return "unavailable"  # the replica does not serve this bucket (yet): a pool problem, not the caller's
    if "INVALID_ARGUMENT" in status:
        return "bad"
    return "unavailable"


class _Embeddings:
    """POST /v1/embeddings as a plain ASGI handler: the hot path skips FastAPI's routing, middleware
    and response classes (measured: a quarter of the gateway's CPU per request went there)."""

    def __init__(self, cfg: GatewayConfig, gw: MultiGateway) -> None:
        self.cfg, self.gw = cfg, gw

    async def __call__(self, scope, receive, send) -> None:
        t0 = time.perf_counter()
        status, doc = 200, None
        try:
            headers = dict(scope.get("headers") or ())
            self.check_key(headers.get(b"authorization", b"").decode("latin-1"))
            size = headers.get(b"content-length", b"").decode("latin-1")
            if size.isdigit() and int(size) > self.cfg.max_body_bytes:
                raise ApiError(413, f"request body of {size} bytes is over the limit of {self.cfg.max_body_bytes} bytes")
            raw = await self.body(receive)
            try:
                body = _loads(raw)
            except ValueError as exc:  # json / orjson decode errors, invalid UTF-8
                raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
            if not isinstance(body, dict):
                raise ApiError(400, "the request body must be a JSON object")
            model, raw_opts = self.gw.resolve(body.get("model"))
            texts, ids, fmt, opts = model.parse(body, raw_opts)
            try:
                vecs, tokens = await _within(self.cfg.timeout_s, model.embed(texts, ids, opts))
            except asyncio.TimeoutError:
                raise ApiError(504, f"the request did not finish within {self.cfg.timeout_s:g} s", type_="timeout",
                               code="timeout") from None
            if fmt == "base64":  # float32 little-endian, or the raw int8 / uint8 bytes of the compact types
                raw_vecs = vecs.astype("<f4") if vecs.dtype == np.float32 else vecs
                data = [{"object": "embedding", "index": i,
                         "embedding": base64.b64encode(v.tobytes()).decode("ascii")} for i, v in enumerate(raw_vecs)]
            else:  # float: the arrays themselves (orjson writes numpy without a Python float per value)
                data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vecs)]
            doc = {"object": "list", "data": data, "model": body["model"],
                   "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
            self.gw.metrics.of(self.gw.metrics.model_requests, model.served.name, "200").inc()
        except ApiError as exc:
            status, doc = exc.status, exc.body()
            self.gw.metrics.errors.labels(str(status)).inc()
        except Exception as exc:  # a bug: the request gets a 500 in OpenAI's envelope, the gateway serves on
            status = 500
            doc = ApiError(500, f"internal error: {type(exc).__name__}: {exc}", type_="server_error").body()
            self.gw.metrics.errors.labels("500").inc()
        self.gw.metrics.of(self.gw.metrics.requests, "embeddings", str(status)).inc()
        if status == 200:
            self.gw.metrics.latency.observe(time.perf_counter() - t0)
        payload = _dumps(doc)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})

    def check_key(self, auth: str) -> None:
        if self.cfg.api_key is None:
            return
        token = auth[7:] if auth.lower().startswith("bearer ") else ""
        if not token or not hmac.compare_digest(token.encode(), self.cfg.api_key.encode()):
            raise ApiError(401, "incorrect or missing API key (send Authorization: Bearer <key>)",
                           code="invalid_api_key")

    async def body(self, receive) -> bytes:
        parts, n = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                raise ApiError(499, "the client went away")
            chunk = msg.get("body", b"")
            n += len(chunk)
            if n > self.cfg.max_body_bytes:
                raise ApiError(413, f"request body is over the limit of {self.cfg.max_body_bytes} bytes")
            parts.append(chunk)
            if not msg.get("more_body", False):
                return b"".join(parts)


class GatewayApp:
    """The gateway's ASGI app: POST /v1/embeddings by `_Embeddings`, everything else (models,
    health, metrics, lifespan, 404 / 405) by FastAPI."""

    def __init__(self, cfg: GatewayConfig) -> None:
        from contextlib import asynccontextmanager

        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse, Response

        gw = self.gateway = MultiGateway(cfg)
        self.embeddings = _Embeddings(cfg, gw)

        @asynccontextmanager
        async def lifespan(_app):
            # what start-up made lives as long as the gateway: out of the collector's way (py-spy had the
            # cyclic GC's full passes over it at 3% of the gateway's CPU under load)
            gc.collect()
            gc.freeze()
            yield
            await gw.close()

        api = self.api = FastAPI(title="embtrt gateway", lifespan=lifespan, docs_url=None, redoc_url=None)

        @api.get("/v1/models")
        async def models(request: Request):
            try:
                self.embeddings.check_key(request.headers.get("authorization", ""))
            except ApiError as exc:
                gw.metrics.requests.labels("models", str(exc.status)).inc()
                gw.metrics.errors.labels(str(exc.status)).inc()
                return JSONResponse(exc.body(), status_code=exc.status)
            return {"object": "list", "data": gw.describe()}

        @api.get("/health/live")
        async def live():
            return {"status": "live"}

        @api.get("/health/ready")
        async def ready():
            pools = await gw.ready()
            ok = all(v == "ok" for v in pools.values())
            return JSONResponse({"status": "ready" if ok else "not ready", "pools": pools},
                                status_code=200 if ok else 503)

        @api.get("/metrics")
        async def metrics():
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

            return Response(generate_latest(gw.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] == "/v1/embeddings" and scope["method"] == "POST":
            await self.embeddings(scope, receive, send)
        else:
            await self.api(scope, receive, send)


def create_app(cfg: GatewayConfig) -> GatewayApp:
    return GatewayApp(cfg)


def run(cfg: GatewayConfig, host: str = "127.0.0.1", port: int = 8080, log=print) -> None:
    import uvicorn

    app = create_app(cfg)
    gw = app.gateway
    for name, g in gw.models.items():
        for p in g.pools:
            log(f"{name}: pool {p.name}: buckets {','.join(map(str, p.buckets))} -> {', '.join(p.urls)} (route {g.route})")
    log(f"embtrt gateway for {', '.join(gw.models)} on http://{host}:{port}/v1/embeddings")
    # no proxy-header middleware: the gateway never reads the client's address, and it wraps every request
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, proxy_headers=False)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `embtrt gateway`")
