"""The operations served models take over HTTP (#50 item 3): what http.Handler runs between the
envelope (key, admission, body, deadline, errors, metrics) and the response, one row per operation.

An operation parses a route's body in that route's dialect (the kinds'
scale_schema) into a request naming the served model, asks the model behind it, and renders the
answer in the dialect again. A new operation (a classifier's `classify`, a multi-vector model's
token vectors) is one more `Operation` here and its rows in routes.TABLE; the envelope is not
written again.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from embtrt_backend.kinds import EMBEDDER, RERANKER, SPARSE

from ...kinds.embedder.scale_schema import parse_embeddings
from ...kinds.reranker.scale_schema import ROUTES as RERANK_ROUTES, parse_rerank, render as render_rerank
from ...kinds.sparse.scale_schema import ROUTES as SPARSE_ROUTES, parse_sparse, render as render_sparse

Answer = tuple[Any, int, list]   # (the response document, its size about, extra headers)


@dataclass(frozen=True)
class Operation:
    name: str                      # the route table's operation
    metric_route: str              # the `route` label of embtrt_gateway_requests (dashboards read it)
    latency: str                   # the Metrics histogram of its successful requests' latency
    # (gateway, config, path, JSON body) -> the request; its `served` names the model
    parse: Callable[[Any, Any, str, Any], Any]
    # (gateway, request) -> the answer in the route's dialect
    answer: Callable[[Any, Any], Awaitable[Answer]]


async def _embed(gw, req) -> Answer:
    vecs, tokens = await gw.embedders[req.served].embed(req.texts, req.ids, req.options)
    if req.encoding_format == "base64":  # float32 little-endian, or the raw int8 / uint8 bytes of the compact types
        raw_vecs = vecs.astype("<f4") if vecs.dtype == "float32" else vecs
        data = [{"object": "embedding", "index": i,
                 "embedding": base64.b64encode(v.tobytes()).decode("ascii")} for i, v in enumerate(raw_vecs)]
    else:  # float: the arrays themselves (orjson writes numpy without a Python float per value)
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vecs)]
    return ({"object": "list", "data": data, "model": req.model,
             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}, len(data) * 1536, [])


async def _rank(gw, req) -> Answer:
    scores, tokens = await gw.rerankers[req.served].rerank(req)
    doc, headers = render_rerank(req, scores, tokens)
    # the response's size, to encode it off the event loop when large: only the documents it shows
    rows = doc if isinstance(doc, list) else doc.get("results", doc.get("rankings", []))
    size = 64 * len(rows) + (sum(len(req.documents[r["index"]]) for r in rows) if req.return_documents else 0)
    return doc, size, headers


async def _embed_sparse(gw, req) -> Answer:
    model = gw.sparse[req.served]
    rows, tokens = await model.encode(req)
    doc, headers = render_sparse(req, rows, tokens, model.served.token_of)
    return doc, 32 * sum(len(ix) for ix, _ in rows), headers


OPERATIONS: dict[str, Operation] = {op.name: op for op in (
    Operation("embed", EMBEDDER.metric_route, "latency",
              lambda gw, cfg, path, body: parse_embeddings(body, gw.schemas, cfg.max_items, gw.kinds), _embed),
    Operation("rank", RERANKER.metric_route, "rerank_latency", lambda gw, cfg, path, body: parse_rerank(
        RERANK_ROUTES[path], body, gw.rerank_schemas, gw.kinds, cfg.max_items), _rank),
    Operation("embed_sparse", SPARSE.metric_route, "sparse_latency", lambda gw, cfg, path, body: parse_sparse(
        SPARSE_ROUTES[path], body, gw.sparse_schemas, cfg.max_items, gw.kinds), _embed_sparse),
)}
