"""NVIDIA NIM's dialect: its request shapes (its errors are OpenAI's envelope).

- rank, `nim`: POST /v1/ranking `{model, query: {text}, passages: [{text}], truncate?: NONE | END}` ->
  `{rankings: [{index, logit}], usage}`; logits are the raw scores.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from embtrt_backend.kinds import Kind

from ..errors import ApiError, json_object
from ..operation import Shape
from ..ops import rank
from ..ops.rank import RerankModel, RerankRequest

TRUNCATE = {"NONE": False, "END": True}


def parse_rank(body: Any, models: Mapping[str, RerankModel], kinds: Mapping[str, Kind], max_items: int,
               default: str | None = None) -> RerankRequest:
    body = json_object(body)
    name, m = rank.ranker(body, models, kinds, False, default)
    q = body.get("query")
    if not isinstance(q, dict):
        raise ApiError(400, 'query must be an object {"text": "..."}', param="query")
    query = rank.query(q.get("text"), "query.text")
    docs = rank.documents(body.get("passages"), "passages", max_items, texts_only=False, objects_only=True)
    trunc = body.get("truncate", "NONE")
    if trunc not in TRUNCATE:
        raise ApiError(400, f"truncate must be 'NONE' or 'END', not {trunc!r}", param="truncate")
    req = RerankRequest("nim", body.get("model"), name, query, docs, None, False, "raw", TRUNCATE[trunc])
    return rank.finish(req, body, m, "query.text", "passages")


def render_rank(req: RerankRequest, scores: np.ndarray, tokens: int) -> tuple[Any, list]:
    order, values = rank.ranked(req, scores)
    return ({"rankings": [{"index": i, "logit": values[i]} for i in order],
             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}, [])


SHAPES = {
    ("rank", "nim"): Shape(lambda models, kinds, cfg, path, body: parse_rank(body, models, kinds, cfg.max_items),
                           rank.answerer(render_rank)),
}
