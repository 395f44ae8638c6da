"""The rank operation's routes: the rerank APIs (scale_schema: Cohere / Jina / vLLM, TEI, NIM) and vLLM's
score API (scale_score), one row."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from embtrt_backend.kinds import RERANKER, Kind

from ...scale.gateway.operation import Answer, Operation
from ...scale.gateway.route_table import dialect_of
from . import scale_schema, scale_score
from .scale_schema import RerankModel



def parse(models: Mapping[str, RerankModel], kinds: Mapping[str, Kind], cfg, path: str, body: Any):
    api = dialect_of(path)
    if api == "vllm-score":
        return scale_score.parse_score(body, models, kinds, cfg)
    return scale_schema.parse_rerank(api, body, models, kinds, cfg.max_items, cfg.default_model)


async def answer(model, req) -> Answer:
    if req.api == "vllm-score":
        return await scale_score.answer_score(model, req)
    return await scale_schema.answer(model, req)


OPERATIONS = (Operation("rank", RERANKER.metric_route, "rerank_latency", parse, answer, needs=(("rerank",),)),)
