"""The gateway's own routes in the anchors' shapes (#51): TEI's POST / (the operation picked by the
body and the served model), GET /info, /health, /ping and /; NIM's GET /v1/health/ready, /live,
/v1/metadata and /v1/metrics. The model operations' routes are the kinds' (operations.py).

POST / is TEI's route of the model it serves (TEI picks /embed, /rerank or /embed_sparse by its
model's type at start), and by the body's shape where TEI's own clients need it: Hugging Face Hub's
InferenceClient posts every task to its base URL, so `{"inputs": {"source_sentence", "sentences"}}`
is a similarity request (TEI answers it only when started with TASK=sentence-similarity).
"""

# No `from __future__ import annotations`: FastAPI reads the GET routes' annotations (`request: Request`) at run time.
from typing import Any, Callable

from .asgi import _dumps, _respond, check_key, check_length
from .config import GatewayConfig
from .dialects import render_error
from .errors import ApiError, implied_model
from .operations import operations
from .registry import MultiGateway

SIMILARITY = "/similarity"


def tei_model(gw: MultiGateway, cfg: GatewayConfig) -> str:
    """The model TEI's bodies (which name none) go to on POST / and /info describes: the only model,
    else --default-model, else a 422 naming them."""
    implied = implied_model(gw.models, cfg.default_model)   # --default-model is one of them (checked at start)
    if implied is not None:
        return implied
    raise ApiError(400, "this gateway serves several models (" + ", ".join(map(repr, gw.models)) + "): TEI's "
                   "bodies name none, so start it with --default-model, or post to the route of the operation "
                   "with a model field", param="model")


def tei_route(op: str) -> str | None:
    """The path of the operation's TEI route (its first route of a tei dialect), None where it has none."""
    return next((p for p, d in operations()[op].routes.items() if d == "tei"), None)


class Root:
    """TEI's POST /: the body read and decoded once, then handed (in the scope) to the handler of the
    operation it asks for, as if posted to that operation's TEI route: errors, headers and metrics
    are that route's."""

    def __init__(self, cfg: GatewayConfig, gw: MultiGateway, handlers: dict[str, Any]) -> None:
        self.cfg, self.gw, self.handlers = cfg, gw, handlers
        self.reader = next(iter(handlers.values()))   # any operation's handler reads a body within the limits

    def pick(self, body: Any) -> tuple[str, str]:
        """(operation, path) of a decoded body."""
        if isinstance(body, dict) and isinstance(body.get("inputs"), dict):
            if "embed" in self.gw.operations:
                return "embed", SIMILARITY
            raise ApiError(400, "a similarity request ({\"inputs\": {\"source_sentence\", \"sentences\"}}) needs an "
                           "embedder; this gateway serves none", param="inputs", code="wrong_operation")
        if isinstance(body, dict) and isinstance(body.get("parameters"), dict) and "classify" in self.gw.operations:
            return "classify", "/predict"   # Hugging Face's task API shape (text_classification) to a classifier
        name = tei_model(self.gw, self.cfg)
        for op in self.gw.kinds[name].operations:
            path = tei_route(op)
            if path is not None:
                return op, path
        raise ApiError(400, f"{name!r} serves no TEI route", code="wrong_operation")

    async def __call__(self, scope, receive, send) -> None:
        try:
            headers = dict(scope.get("headers") or ())
            check_key(self.cfg, headers.get(b"authorization", b"").decode("latin-1"))
            check_length(self.cfg, headers)
            body = await self.reader.json_body(receive)   # within --body-timeout and the size limit (Handler.body)
            op, path = self.pick(body)
        except Exception as exc:   # an ApiError in TEI's shape; anything else a 500 in it, the gateway serving on
            err = exc if isinstance(exc, ApiError) else ApiError(500, f"internal error: {type(exc).__name__}: {exc}")
            status, doc = render_error(err, "tei")
            self.gw.metrics.requests.labels("root", str(status)).inc()
            self.gw.metrics.refused(status, err.reason if isinstance(exc, ApiError) else "internal_error")
            extra = [*err.headers, *([(b"connection", b"close")] if err.status == 408 else [])]
            await _respond(send, status, _dumps(doc), extra)
            return
        await self.handlers[op]({**scope, "path": path, "embtrt.body": body}, receive, send)


def add_routes(api, cfg: GatewayConfig, gw: MultiGateway, readiness: Callable) -> None:
    """GET /info (TEI), /v1/health/ready, /v1/health/live, /v1/metadata, /v1/metrics (NIM) on the FastAPI app."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, Response

    from ... import __version__

    @api.get("/info")
    async def info(request: Request):
        """TEI's /info of the model TEI's bodies go to (tei_model); the API key where the gateway has one, as TEI."""
        try:
            check_key(cfg, request.headers.get("authorization", ""))
            name = tei_model(gw, cfg)
        except ApiError as exc:
            status, doc = render_error(exc, "tei")
            return JSONResponse(doc, status_code=status)
        g = gw.models[name]
        m = g.served.manifest
        return {"model_id": name, "model_sha": m.identity.get("embtrt.model_sha256"), "model_dtype": m.precision,
                "served_model_name": name, "model_type": g.tei_type(), "max_concurrent_requests": cfg.max_concurrent,
                "max_input_length": m.max_seq_length, "max_batch_tokens": cfg.max_request_tokens,
                "max_batch_requests": None, "max_client_batch_size": cfg.max_items,
                "auto_truncate": m.overflow != "reject", "tokenization_workers": cfg.cpu_threads,
                "version": __version__, "sha": None, "docker_label": None}

    @api.get("/v1/health/ready")
    async def nim_ready():
        ok = (await readiness())[1]
        return JSONResponse({"object": "health.response", "message": "ready" if ok else "not ready", "ready": ok},
                            status_code=200 if ok else 503)

    @api.get("/v1/health/live")
    async def nim_live():
        return {"object": "health.response", "message": "live", "live": True}

    @api.get("/v1/metadata")
    async def nim_metadata(request: Request):
        """NIM's metadata schema; what a NIM container ships (assets, a license file, a profile) embtrt has
        not, so those fields are empty and the profile is the repositories' identity hash. The API key
        where the gateway has one (the models' identities, as /v1/models)."""
        try:
            check_key(cfg, request.headers.get("authorization", ""))
        except ApiError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)
        return {"version": __version__, "assetInfo": [], "repository_override": "",
                "licenseInfo": {"name": "", "path": "", "sha": "", "size": 0, "url": "", "type": "file"},
                "selectedModelProfileId": ",".join(g.served.identity.get("embtrt.model_sha256", "")[:16]
                                                   for g in gw.models.values()),
                "modelInfo": [{"shortName": name, "modelUrl": "", "kind": g.kind.name, "embtrt": g.served.identity}
                              for name, g in gw.models.items()]}

    @api.get("/v1/metrics")
    async def nim_metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(gw.metrics.registry), media_type=CONTENT_TYPE_LATEST)
