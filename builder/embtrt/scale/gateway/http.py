"""The gateway's ASGI layer. Requests go by the route table (routes.py) to their operation's
handler: every model operation (operations.py: the operations of ops/ with the dialects' shapes: POST
/v1/embeddings, the rerank routes POST /v1/rerank, /v2/rerank, /rerank, /v1/ranking, the sparse routes
POST /v1/sparse, /embed_sparse) through one plain
ASGI `Handler` (key, admission, body limit, deadline, JSON, errors, metrics) around the operation's
parse and answer; the gateway's own GET routes (/v1/models, health, metrics) by FastAPI. An
unknown path is a 404 naming the routes served, a known one asked with another method a 405 with
Allow. `run` serves it with uvicorn.

No `from __future__ import annotations` here: FastAPI reads the routes' annotations (`request: Request`,
imported where the app is made) at run time.
"""

import asyncio
import gc
import time
from typing import Any

from .anchors import Root, add_routes
from .asgi import _dumps, _loads, _respond, _within, check_key, check_length
from .config import GatewayConfig
from .dialects import TIMED, render_error
from .dialects.tei import timing as tei_timing
from .errors import ApiError
from . import tracing
from .fields import refuse_misspelt
from .operations import Operation, operations
from .registry import MultiGateway
from .routes import Routes


class Handler:
    """One model operation's routes (operations.py) as a plain ASGI handler: the hot path skips
    FastAPI's routing, middleware and response classes (measured: a quarter of the gateway's CPU per
    request went there). The envelope is the same for every operation: key, admission, body limit and
    deadline, JSON, errors in the gateway's shape, metrics; the operation parses, answers, renders."""

    def __init__(self, cfg: GatewayConfig, gw: MultiGateway, op: Operation) -> None:
        self.cfg, self.gw, self.op = cfg, gw, op
        self.route = op.metric_route   # the label of embtrt_gateway_requests
        self.models, self.schemas = gw.serving[op.name], gw.schemas[op.name]   # the models serving it, by name
        self.dialects = op.routes   # each path's dialect: its errors' shape (dialects.py), TEI's headers

    def latency(self):
        return getattr(self.gw.metrics, self.op.latency)

    async def __call__(self, scope, receive, send) -> None:
        if tracing.TRACER is None:
            await self.serve(scope, receive, send)
            return
        with tracing.request(scope, f"{scope.get('method', 'POST')} {scope['path']}",
                             {"http.request.method": scope.get("method", "POST"), "http.route": scope["path"],
                              "embtrt.route": self.route, "embtrt.operation": self.op.name,
                              "embtrt.dialect": self.dialects.get(scope["path"], "openai")}) as span:
            tracing.finish(span, await self.serve(scope, receive, send))

    async def serve(self, scope, receive, send) -> int:
        """One request, answered: its status."""
        t0 = time.perf_counter()
        status, doc, served, extra = 200, None, None, []
        dialect = self.dialects.get(scope["path"], "openai")
        out_size = 0  # the response's size, about: large ones are serialized off the event loop
        admitted = False
        adm = self.gw.admission
        try:
            headers = dict(scope.get("headers") or ())
            check_key(self.cfg, headers.get(b"authorization", b"").decode("latin-1"))
            adm.enter()  # 429 past --max-concurrent-requests, before any work
            admitted = True
            self.gw.metrics.in_flight.inc()
            check_length(self.cfg, headers)
            try:  # the deadline runs from the request's first byte: reading its body counts
                doc, served, out_size, more = await _within(self.cfg.timeout_s, self.handle(scope, receive))
                extra.extend(more)
            except asyncio.TimeoutError:
                raise ApiError(504, f"the request did not finish within {self.cfg.timeout_s:g} s", type_="timeout",
                               code="timeout") from None
        except ApiError as exc:
            status, doc = render_error(exc, dialect)
            served = served or exc.served
            if exc.retry_after is not None:
                extra.append((b"retry-after", str(exc.retry_after).encode()))
            if exc.status == 408:  # a body that never came: the connection is not reused
                extra.append((b"connection", b"close"))
            self.gw.metrics.refused(status, exc.reason)
        except Exception as exc:  # a bug: the request gets a 500 in its route's error shape, the gateway serves on
            status, doc = render_error(ApiError(500, f"internal error: {type(exc).__name__}: {exc}", type_="server_error"),
                                       dialect)
            self.gw.metrics.refused(status, "internal_error")
        finally:
            if admitted:
                adm.leave()
                self.gw.metrics.in_flight.dec()
        metrics = self.gw.metrics
        model = None if served is None else self.gw.reported.get(served, served)   # an alias counts under its model
        if model is not None:
            metrics.of(metrics.model_requests, model, str(status)).inc()
        metrics.of(metrics.requests, self.route, str(status)).inc()
        if status == 200:
            took = time.perf_counter() - t0
            self.latency().observe(took)
            if model is not None:
                metrics.of(metrics.model_latency, model, dialect).observe(took)
            if dialect in TIMED:   # TEI's model routes: its compute headers
                extra.extend(tei_timing(took * 1e3))
        with tracing.span("render"):
            raw = await adm.offload(out_size, _dumps, doc)
        await _respond(send, status, raw, extra)
        return status

    async def json_body(self, receive):
        """The request body, decoded (large ones off the event loop); 400 where it is not JSON."""
        raw = await self.body(receive)
        try:
            return await self.gw.admission.offload(len(raw), _loads, raw)
        except ValueError as exc:  # json / orjson decode errors, invalid UTF-8
            raise ApiError(400, f"the request body is not valid JSON: {exc}") from None

    async def handle(self, scope, receive) -> tuple[Any, str, int, list]:
        """Body -> (the response document, the served model's name, its size about, extra headers); JSON
        and tokenization of large requests off the event loop. A body decoded already (POST /, which picks
        the operation by it: anchors.Root) is in the scope."""
        body = scope["embtrt.body"] if "embtrt.body" in scope else await self.json_body(receive)
        try:
            with tracing.span("parse"):
                refuse_misspelt(body)
                req = self.op.parse(self.schemas, self.gw.kinds, self.cfg, scope["path"], body)
        except ApiError as exc:   # refused before a model was resolved: counted under the model it names
            exc.served = exc.served or self.named(body)
            raise
        tracing.annotate(model=self.gw.reported.get(req.served, req.served))
        try:
            with tracing.span("answer"):
                doc, size, headers = await self.op.answer(self.models[req.served], req)
        except ApiError as exc:
            exc.served = req.served  # counted per model and status
            raise
        return doc, req.served, size, headers

    def named(self, body) -> str | None:
        """The served model a body names (its `model`, or a NAME-query alias of one), else None."""
        name = body.get("model") if isinstance(body, dict) else None
        if not isinstance(name, str):
            return None
        if name in self.models:
            return name
        return max((k for k in self.models if name.startswith(k + "-")), key=len, default=None)

    async def body(self, receive) -> bytes:
        """The request body, within --body-timeout (408 and the connection closed past it)."""
        try:
            return await _within(self.cfg.body_timeout_s, self._read(receive))
        except asyncio.TimeoutError:
            raise ApiError(408, f"the request body did not arrive within {self.cfg.body_timeout_s:g} s",
                           code="body_timeout") from None

    async def _read(self, receive) -> bytes:
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
    """The gateway's ASGI app: each request to its operation's handler by the route table (a model
    operation's by a `Handler` of it, the gateway's own GET routes and the lifespan by FastAPI); 404 /
    405 by the table."""

    def __init__(self, cfg: GatewayConfig) -> None:
        from contextlib import asynccontextmanager

        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse, Response

        gw = self.gateway = MultiGateway(cfg)
        self.handlers = {name: Handler(cfg, gw, op) for name, op in operations().items()}

        @asynccontextmanager
        async def lifespan(_app):
            # what start-up made lives as long as the gateway: out of the collector's way (py-spy had the
            # cyclic GC's full passes over it at 3% of the gateway's CPU under load)
            gc.collect()
            gc.freeze()
            yield
            await gw.close()
            tracing.shutdown()   # the spans not yet exported

        # FastAPI's own /openapi.json would list its few GET routes only: the route table's is served instead
        api = self.api = FastAPI(title="embtrt gateway", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

        def refused(exc: ApiError) -> JSONResponse:
            gw.metrics.requests.labels("models", str(exc.status)).inc()
            gw.metrics.refused(exc.status, exc.reason)
            return JSONResponse(exc.body(), status_code=exc.status)

        @api.get("/v1/models")
        async def models(request: Request):
            try:
                check_key(cfg, request.headers.get("authorization", ""))
            except ApiError as exc:
                return refused(exc)
            return {"object": "list", "data": gw.describe()}

        @api.get("/v1/models/{model_id:path}")
        async def model(model_id: str, request: Request):
            """OpenAI's models.retrieve: the model's /v1/models entry (a name with "/" arrives as is or as %2F)."""
            try:
                check_key(cfg, request.headers.get("authorization", ""))
                entry = next((m for m in gw.describe() if m["id"] == model_id), None)
                if entry is None:
                    raise ApiError(404, f"the model {model_id!r} does not exist; this gateway serves "
                                   + ", ".join(map(repr, gw.models)), param="model", code="model_not_found")
            except ApiError as exc:
                return refused(exc)
            return entry

        @api.get("/health/live")
        async def live():
            return {"status": "live"}

        async def readiness() -> tuple[dict[str, str], bool]:
            """Every pool's state, and whether all answer (the one rule of both readiness routes)."""
            pools = await gw.ready()
            return pools, all(v == "ok" for v in pools.values())

        @api.get("/health/ready")
        async def ready():
            pools, ok = await readiness()
            return JSONResponse({"status": "ready" if ok else "not ready", "pools": pools},
                                status_code=200 if ok else 503)

        async def tei_health():
            """TEI's GET /health, /ping and /: 200 with no body when every pool answers, else 503 in TEI's
            error shape."""
            if (await readiness())[1]:
                return Response(status_code=200)
            return JSONResponse({"error": "unhealthy", "error_type": "Unhealthy"}, status_code=503)

        for path in ("/health", "/ping", "/"):
            api.add_api_route(path, tei_health, methods=["GET"])
        add_routes(api, cfg, gw, readiness)

        @api.get("/metrics")
        async def metrics():
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

            return Response(generate_latest(gw.metrics.registry), media_type=CONTENT_TYPE_LATEST)

        @api.get("/openapi.json")
        async def openapi_json():
            from ... import __version__
            from .openapi import document

            return document(gw, __version__)

        @api.get("/docs")
        async def openapi_page():
            from fastapi.responses import HTMLResponse

            from ... import __version__
            from .openapi import page

            return HTMLResponse(page(gw, __version__))

        own = {op: api for op in ("models", "live", "ready", "metrics", "info", "openapi")}
        self.routes = Routes({**self.handlers, **own, "root": Root(cfg, gw, self.handlers)}, gw.operations)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":   # the lifespan
            await self.api(scope, receive, send)
            return
        try:
            handler = self.routes.find(scope["method"], scope["path"])
        except ApiError as exc:   # 404 / 405, before any handler runs
            await _respond(send, exc.status, _dumps(exc.body()), exc.headers)
            return
        await handler(scope, receive, send)


def prepare(cfg: GatewayConfig, host: str, port: int, log=print) -> tuple["GatewayApp", dict]:
    """The gateway's ASGI app and uvicorn's options, its pools and routes logged: what `run` serves, and
    `embtrt up` on a thread of its own (Background)."""
    import logging

    from ...serve.ports import refuse_taken
    from .connections import uvicorn_options

    refuse_taken(host, {"--port": port})  # before anything says where it serves
    if not logging.getLogger().handlers:  # upstream failures' details go to the log, not to clients
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = GatewayApp(cfg)
    gw = app.gateway
    for name, g in gw.models.items():
        for p in g.pools:
            log(f"{name}: pool {p.name}: buckets {','.join(map(str, p.buckets))} -> {', '.join(p.urls)} (route {g.route})")
    log(f"embtrt gateway for {', '.join(gw.models)} on {'https' if cfg.tls_cert else 'http'}://{host}:{port}: "
        + "; ".join(gw.advertised()))
    traced = tracing.configure(cfg.otlp_endpoint, cfg.trace_sample)
    if traced:
        log(f"traces to {traced} (OTLP/HTTP), {tracing.sample_from_env(cfg.trace_sample):g} of the requests without a "
            "sampled traceparent")
    # no proxy-header middleware: the gateway never reads the client's address, and it wraps every request
    tls: dict = {"ssl_certfile": str(cfg.tls_cert), "ssl_keyfile": str(cfg.tls_key)} if cfg.tls_cert else {}
    if cfg.cors_origins:
        from .cors import Cors

        log(f"CORS: browsers may call it from {', '.join(cfg.cors_origins)}")
        app = Cors(app, cfg.cors_origins)   # type: ignore[assignment]
    return app, {"host": host, "port": port, "log_level": "warning", "access_log": False, "proxy_headers": False,
                 **tls, **uvicorn_options(cfg.limits())}


def run(cfg: GatewayConfig, host: str = "127.0.0.1", port: int = 8080, log=print) -> None:
    import uvicorn

    app, options = prepare(cfg, host, port, log)
    uvicorn.run(app, **options)
    log("embtrt gateway stopped")


class Background:
    """The gateway served on a thread of its own (`embtrt up`): uvicorn installs no signal handlers off the
    main thread, so whoever runs it decides when it stops (`stop`: no new connections, the requests in
    flight answered, at most `timeout_s`)."""

    def __init__(self, cfg: GatewayConfig, host: str, port: int, log=print) -> None:
        import threading

        import uvicorn

        app, options = prepare(cfg, host, port, log)
        self.server = uvicorn.Server(uvicorn.Config(app, **options))
        self.thread = threading.Thread(target=self.server.run, name="embtrt-gateway", daemon=True)

    def start(self, timeout_s: float = 60.0) -> None:
        import time

        from ...errors import ServerError

        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise ServerError("the gateway did not start", "see the lines above")
            time.sleep(0.02)

    def stop(self, timeout_s: float = 30.0) -> None:
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(timeout_s)
