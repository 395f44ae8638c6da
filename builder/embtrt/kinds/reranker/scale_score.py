"""vLLM's score API on the rank operation (#51), pure parsing and one answer: POST /score and its
older spelling /v1/score (vLLM serves both).

`{model?, queries | data_1 | text_1, documents | items | data_2 | text_2, use_activation?}` (tried in
vLLM's order: queries+documents, queries+items, data_1+data_2, text_1+text_2); each side a string or a
list of strings, paired 1 with 1, 1 with N (the one query against every document) or N with N (by
position) -> `{id, object: "list", created, model, data: [{index, object: "score", score}], usage}` in
pair order (not sorted, as vLLM). Scores are `CrossEncoder.predict`'s (the model's activation; with
`use_activation: false` the raw logits). The pairs go to the front door as rows of (query, document),
whatever their queries. Multimodal content parts are refused.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from embtrt_backend.kinds import RERANKER, Kind

from ...scale.gateway.errors import ApiError, check_bytes, empty, model_name, no_such_model, short
from ...scale.gateway.operations import Answer
from .scale_schema import RerankModel, instruction_of

SPELLINGS = (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2"))


@dataclass(frozen=True)
class ScoreRequest:
    api: str                         # vllm-score
    model: str | None
    served: str
    pairs: list[tuple[str, str]]
    activation: str = "default"
    field: str = "documents"         # the request's name of the documents' side (documents, items, data_2, text_2)
    instruction: str | None = None   # an LLM-style reranker's (scale_schema.instruction_of)


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
                        right, instruction_of(body, m, name))


async def answer_score(model, req: ScoreRequest) -> Answer:
    """The pairs scored in pair order (Reranker.score_pairs: the caps once, a refused pair named by its index)."""
    more = {} if req.instruction is None else {"instruction": req.instruction}   # only a templated reranker takes one
    scores, tokens = await model.score_pairs(req.pairs, req.activation, req.field, **more)
    scores = scores[:, 0].astype(np.float64)
    return ({"id": f"score-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
             "model": req.model if req.model is not None else req.served,
             "data": [{"index": i, "object": "score", "score": v} for i, v in enumerate(scores.tolist())],
             "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0,
                       "prompt_tokens_details": None}}, 48 * len(req.pairs), [])
