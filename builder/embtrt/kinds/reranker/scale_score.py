"""vLLM's score API on the rank operation (#51), pure parsing and one answer: POST /score and its
older spelling /v1/score (vLLM serves both).

`{model?, queries | data_1 | text_1, documents | items | data_2 | text_2, use_activation?}` (tried in
vLLM's order: queries+documents, queries+items, data_1+data_2, text_1+text_2); each side a string or a
list of strings, paired 1 with 1, 1 with N (the one query against every document) or N with N (by
position) -> `{id, object: "list", created, model, data: [{index, object: "score", score}], usage}` in
pair order (not sorted, as vLLM). Scores are `CrossEncoder.predict`'s (the model's activation; with
`use_activation: false` the raw logits). Pairs of several queries go up as one request per query,
concurrently. Multimodal content parts are refused.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from embtrt_backend.kinds import RERANKER, Kind

from ...scale.gateway.errors import ApiError, check_bytes, empty, model_name, no_such_model, short
from ...scale.gateway.front_door import renamed
from ...scale.gateway.operations import Answer
from .scale_schema import RerankModel, RerankRequest

SPELLINGS = (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2"))


@dataclass(frozen=True)
class ScoreRequest:
    api: str                         # vllm-score
    model: str | None
    served: str
    pairs: list[tuple[str, str]]
    activation: str = "default"
    field: str = "documents"         # the request's name of the documents' side (documents, items, data_2, text_2)


def _side(v: Any, field: str, max_items: int) -> list[str]:
    if isinstance(v, str):
        return [v]
    if not isinstance(v, list):
        raise ApiError(400, f"{field} must be a string or a list of strings, got {short(v)}", param=field)
    if not v:
        raise empty(field)
    if len(v) > max_items:
        raise ApiError(400, f"{field} has {len(v)} items; at most {max_items} per request", param=field)
    for i, x in enumerate(v):
        if not isinstance(x, str):
            raise ApiError(400, f"{field}[{i}] must be a string (multimodal content is not served), got {short(x)}",
                           param=field)
    return v


def parse_score(body: Any, models: Mapping[str, RerankModel], kinds: Mapping[str, Kind], cfg) -> ScoreRequest:
    try:
        return _parse(body, models, kinds, cfg)
    except ApiError as exc:
        exc.dialect = "vllm"
        raise


def _parse(body: Any, models: Mapping[str, RerankModel], kinds: Mapping[str, Kind], cfg) -> ScoreRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    name = model_name(body.get("model"), models, kinds, RERANKER, optional=True, default=cfg.default_model)
    m = models.get(name)
    if m is None:
        raise no_such_model(name, models, RERANKER, "scores with")
    if m.num_labels != 1:
        raise ApiError(400, f"{name!r} has {m.num_labels} labels: the score API takes a model of one label",
                       param="model", code="wrong_model_kind")
    left, right = next(((a, b) for a, b in SPELLINGS if a in body and b in body), ("queries", "documents"))
    if body.get(left) is None or body.get(right) is None:
        raise ApiError(400, f"you must provide {left} and {right} (or data_1 / data_2, text_1 / text_2)",
                       param=left if body.get(left) is None else right)
    qs, ds = _side(body[left], left, cfg.max_items), _side(body[right], right, cfg.max_items)
    if len(qs) == 1:
        qs = qs * len(ds)
    if len(qs) != len(ds):
        raise ApiError(400, f"{left} has {len(qs)} items and {right} {len(ds)}: give one {left[:-1] if left.endswith('s') else left} "
                       f"or as many as {right}", param=right)
    tpt = body.get("truncate_prompt_tokens")
    if tpt not in (None, -1):
        raise ApiError(400, f"truncate_prompt_tokens {short(tpt)} is not served: pairs are cut at the model's max "
                       "length (-1)", param="truncate_prompt_tokens")
    act = body.get("use_activation")
    if act is not None and not isinstance(act, bool):
        raise ApiError(400, f"use_activation must be true, false or null, got {short(act)}", param="use_activation")
    check_bytes(qs, m.max_text_bytes, left)
    check_bytes(ds, m.max_text_bytes, right)
    return ScoreRequest("vllm-score", body.get("model"), name, list(zip(qs, ds)), "raw" if act is False else "default",
                        right)


async def answer_score(model, req: ScoreRequest) -> Answer:
    """The pairs scored, one rerank request per distinct query, concurrently; the request's caps checked
    once over all its pairs first, and a refused pair named by its index in the request."""
    groups: dict[str, list[int]] = {}
    for i, (q, _) in enumerate(req.pairs):
        groups.setdefault(q, []).append(i)
    model.admission.check_count(sum(len(q) + len(d) for q, d in req.pairs), req.field)
    await model.check_pair_tokens([q for q, _ in req.pairs], [d for _, d in req.pairs], req.field)

    async def group(q: str, rows: list[int]):
        try:
            return await model.rerank(RerankRequest("cohere", req.model, req.served, q, [req.pairs[i][1] for i in rows],
                                                    activation=req.activation))
        except ApiError as exc:
            raise renamed(exc, "documents", rows, req.field) from None

    done = await asyncio.gather(*(group(q, rows) for q, rows in groups.items()))
    scores = np.empty(len(req.pairs), np.float64)
    for rows, (s, _) in zip(groups.values(), done):
        scores[rows] = s
    tokens = sum(t for _, t in done)
    return ({"id": f"score-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
             "model": req.model if req.model is not None else req.served,
             "data": [{"index": i, "object": "score", "score": v} for i, v in enumerate(scores.tolist())],
             "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0,
                       "prompt_tokens_details": None}}, 48 * len(req.pairs), [])
