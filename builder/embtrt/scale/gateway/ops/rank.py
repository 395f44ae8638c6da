"""The rank operation (#69 item 2): what every rank route's request is, whatever its dialect, and what a model
serving it is asked. The request shapes are the dialects' (dialects/cohere.py: Cohere / Jina / vLLM's rerank
body; tei.py: TEI's /rerank; nim.py: NIM's /v1/ranking; vllm.py: vLLM's score API); each parses into one
`RerankRequest` (or vLLM's `ScoreRequest`) with the fields' checks below, and renders the scores back.

Every shape is sorted by score, highest first, ties in input order (as `CrossEncoder.rank`). Fields an API has
and this gateway does not read are ignored, as the embeddings shapes ignore unknown fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from embtrt_backend.kinds import Kind, of_operation

from ..errors import ApiError, check_bytes, model_name, no_such_model, short
from ..operation import Answer, Declared

NAME, LATENCY = "rank", "rerank_latency"
NEEDS = (("rerank",),)   # what a model serving it has (a score-pairs model also `score_pairs`: vLLM's score API)
RANKER = of_operation(NAME)   # the kind its messages name ("this gateway serves no reranker")
OPERATIONS = (Declared(NAME, RANKER.metric_route, LATENCY, NEEDS),)


@dataclass(frozen=True)
class RerankModel:
    """What parsing a rerank request needs to know of one served model."""

    num_labels: int
    max_text_bytes: int              # the most UTF-8 bytes of a query or a document (the front door's limit)
    takes_instruction: bool = False  # an LLM-style reranker: its prompt template's instruction, per request


@dataclass(frozen=True)
class RerankRequest:
    """A valid rerank request of any shape: pairs (query, each document), what to score them with, and what the
    response shows."""

    api: str                         # cohere | tei | nim: the shape of the response
    model: str | None                # as the client sent it (echoed); None where it sent none (TEI)
    served: str                      # the served model it names
    query: str
    documents: list[str]
    top_n: int | None = None         # None: every document
    return_documents: bool = False   # the parsed cohere shape defaults to true, TEI's return_text to false
    activation: str = "default"      # the front door's activation: default (the model's own) | raw
    truncate: bool = True            # pairs over the max length cut as CrossEncoder.predict cuts them
    truncation_direction: str = "right"
    scoring: dict | None = None      # a multi-vector model's `mode` and `weights` (bge-m3's compute_score), as sent
    instruction: str | None = None   # an LLM-style reranker's instruction (every shape's `instruction`); None: its default


@dataclass(frozen=True)
class ScoreRequest:
    """vLLM's score API: (query, document) pairs scored in pair order."""
    api: str                         # vllm-score
    model: str | None
    served: str
    pairs: list[tuple[str, str]]
    activation: str = "default"
    field: str = "documents"         # the request's name of the documents' side (documents, items, data_2, text_2)
    instruction: str | None = None   # an LLM-style reranker's (instruction_of)


# (what a 404 says the gateway does with its models, what a model of several labels is told after "has N labels")
RERANK_APIS = ("reranks with", " (a classifier, not a ranker): the rerank APIs take a model of one label, whose one "
               "score orders the documents")
SCORE_API = ("scores with", ": the score API takes a model of one label")


def ranker(body: dict, models: Mapping[str, RerankModel], kinds: Mapping[str, Kind], optional: bool,
           default: str | None, api: tuple[str, str] = RERANK_APIS) -> tuple[str, RerankModel]:
    """(the served name, its schema) of a body's `model` (optional where the shape has none: the only model, else
    --default-model): 400 for a model of a kind that does not rank (model_name), 404 where none answers to it, 400
    for a classifier of several labels (`api`: RERANK_APIS or SCORE_API, what those two errors say)."""
    does, one_label = api
    name = model_name(body.get("model"), models, kinds, RANKER, optional=optional, default=default)
    m = models.get(name)
    if m is None:
        raise no_such_model(name, models, RANKER, does)
    if m.num_labels != 1:
        raise ApiError(400, f"{name!r} has {m.num_labels} labels{one_label}", param="model", code="wrong_model_kind")
    return name, m


def finish(req: RerankRequest, body: dict, m: RerankModel, qfield: str, dfield: str) -> RerankRequest:
    """Every rerank shape's common end: a multi-vector model's scoring fields, the instruction, the size caps."""
    extra = {k: body[k] for k in ("mode", "weights") if body.get(k) is not None}
    if extra:
        req = replace(req, scoring=extra)
    instruction = instruction_of(body, m, req.served)
    if instruction is not None:
        req = replace(req, instruction=instruction)
    check_bytes([req.query], m.max_text_bytes, qfield, qfield)
    check_bytes(req.documents, m.max_text_bytes, dfield)
    return req


def instruction_of(body: dict, m: RerankModel, name: str) -> str | None:
    """A body's `instruction` (every rank route's): a string, for a model with a prompt template (an LLM-style
    reranker's); None where the body has none."""
    instruction = body.get("instruction")
    if instruction is None:
        return None
    if not isinstance(instruction, str):
        raise ApiError(400, f"instruction must be a string, got {short(instruction)}", param="instruction")
    if not m.takes_instruction:
        raise ApiError(400, f"{name!r} takes no instruction: it has no prompt template (an LLM-style reranker's)",
                       param="instruction")
    check_bytes([instruction], m.max_text_bytes, "instruction", "instruction")
    return instruction


def query(q: object, field: str) -> str:
    if q is None:
        raise ApiError(400, f"you must provide a {field} parameter", param=field)
    if not isinstance(q, str) or not q:
        raise ApiError(400, f"{field} must be a non-empty string", param=field)
    return q


def documents(docs: object, field: str, max_items: int, texts_only: bool, objects_only: bool = False) -> list[str]:
    """A non-empty list of documents -> their texts. Items are strings (`texts_only`), objects with a
    string `text` (`objects_only`), or either; an empty string is a document (CrossEncoder scores it)."""
    if docs is None:
        raise ApiError(400, f"you must provide a {field} parameter", param=field)
    if isinstance(docs, dict) and not texts_only and not objects_only:   # vLLM's multimodal documents
        return _image_documents(docs, field, max_items)
    if not isinstance(docs, list) or not docs:
        raise ApiError(400, f"{field} must be a non-empty list", param=field, code="empty" if docs == [] else None)
    if len(docs) > max_items:
        raise ApiError(400, f"{field} has {len(docs)} items; at most {max_items} per request", param=field)
    out = []
    what = ("a string" if texts_only else 'an object {"text": "..."}' if objects_only
            else 'a string or an object {"text": "..."}')
    for i, d in enumerate(docs):
        if isinstance(d, str) and not objects_only:
            out.append(d)
        elif isinstance(d, dict) and not texts_only and isinstance(d.get("text"), str):
            out.append(d["text"])
        else:
            raise ApiError(400, f"{field}[{i}] must be {what}, got {short(d)}", param=field)
    return out


def _image_documents(docs: dict, field: str, max_items: int) -> list[str]:
    """vLLM's multimodal documents, `{"content": [{"type": "image_url", "image_url": {"url": ...}}, ...]}` (each part
    one document) -> their URLs (data URIs: a model whose input takes images decodes them; a text model refuses
    them as not its documents' shape)."""
    parts = docs.get("content")
    if not isinstance(parts, list) or not parts:
        raise ApiError(400, f'{field} must be a non-empty list, or {{"content": [image_url parts]}}', param=field)
    if len(parts) > max_items:
        raise ApiError(400, f"{field} has {len(parts)} items; at most {max_items} per request", param=field)
    out = []
    for i, p in enumerate(parts):
        url = p.get("image_url") if isinstance(p, dict) and p.get("type") == "image_url" else None
        if not isinstance(url, dict) or not isinstance(url.get("url"), str):
            raise ApiError(400, f'{field}.content[{i}] must be an image_url part {{"type": "image_url", "image_url": '
                           f'{{"url": "data:image/..."}}}}, got {short(p)}', param=field)
        out.append(url["url"])
    return out


def ranked(req: RerankRequest, scores: np.ndarray) -> tuple[list[int], list[float]]:
    """(the documents' indices by score, highest first, ties in input order, top_n applied; every score)."""
    order = np.argsort(-scores, kind="stable").tolist()
    if req.top_n is not None:
        order = order[:req.top_n]
    return order, scores.astype(np.float64).tolist()


def answerer(render: Callable[[RerankRequest, np.ndarray, int], tuple[Any, list]]):
    """The answer of a rerank shape whose response `render` writes: the model's scores, rendered; the response's
    size (to encode it off the event loop when large) counts only the documents it shows."""
    async def answer(model, req: RerankRequest) -> Answer:
        scores, tokens = await model.rerank(req)
        doc, headers = render(req, scores, tokens)
        rows = doc if isinstance(doc, list) else doc.get("results", doc.get("rankings", []))
        return doc, 64 * len(rows) + (sum(len(req.documents[r["index"]]) for r in rows) if req.return_documents
                                      else 0), headers
    return answer
