"""The rerank APIs' bodies, pure (no server): three shapes parsed into one `RerankRequest`, and one
request's scores rendered back in the shape it came in.

- `cohere`: Cohere / Jina / vLLM, POST /v1/rerank and /v2/rerank: `{model, query, documents, top_n?,
  return_documents?, use_activation?}` (documents: strings, or objects with a string `text`) -> `{id,
  model, usage, results: [{index, relevance_score, document?}]}`; scores as `CrossEncoder.rank` gives
  them (the model's own activation; vLLM's `use_activation: false`: the raw logits); `top_n` 0 is
  every document (vLLM's default); each result carries its `document` unless `return_documents` is
  false (vLLM always sends it, Jina by default; Cohere's clients take it as an optional field);
- `tei`: Hugging Face TEI, POST /rerank: `{query, texts, raw_scores?, return_text?, truncate?,
  truncation_direction?}` (and an optional `model`, which TEI has not) -> `[{index, score, text?}]`.
  A /rerank body with `documents` and no `texts` is vLLM's (its main rerank route): the `cohere` shape,
  its `model` optional as TEI's;
- `nim`: NVIDIA NIM, POST /v1/ranking: `{model, query: {text}, passages: [{text}], truncate?: NONE | END}`
  -> `{rankings: [{index, logit}], usage}`; logits are the raw scores.

Every shape is sorted by score, highest first, ties in input order (as `CrossEncoder.rank`). Fields an
API has and this gateway does not read are ignored, as the embeddings schema ignores unknown fields.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from embtrt_backend.kinds import RERANKER, Kind
from embtrt_backend.pairs import truncation_direction

from ...scale.gateway.dialects import tei_headers
from ...scale.gateway.errors import ApiError, check_bytes, flag as _bool, model_name, no_such_model, short as _short
from ...scale.gateway.dialects import DOC_FIELDS
from ...scale.gateway.operation import Answer

NIM_TRUNCATE = {"NONE": False, "END": True}


@dataclass(frozen=True)
class RerankModel:
    """What parsing a rerank request needs to know of one served reranker."""

    num_labels: int
    max_text_bytes: int              # the most UTF-8 bytes of a query or a document (the front door's limit)
    takes_instruction: bool = False  # an LLM-style reranker: its prompt template's instruction, per request


@dataclass(frozen=True)
class RerankRequest:
    """A valid rerank request of any of the three shapes: pairs (query, each document), what to score
    them with, and what the response shows."""

    api: str                         # cohere | tei | nim: the shape of the response
    model: str | None                # as the client sent it (echoed); None where it sent none (TEI)
    served: str                      # the served reranker it names
    query: str
    documents: list[str]
    top_n: int | None = None         # None: every document
    return_documents: bool = False   # the parsed cohere shape defaults to true, TEI's return_text to false
    activation: str = "default"      # the front door's activation: default (the model's own) | raw
    truncate: bool = True            # pairs over the max length cut as CrossEncoder.predict cuts them
    truncation_direction: str = "right"
    scoring: dict | None = None      # a multi-vector model's `mode` and `weights` (bge-m3's compute_score), as sent
    instruction: str | None = None   # an LLM-style reranker's instruction (every shape's `instruction`); None: its default


def parse_rerank(api: str, body: Any, models: Mapping[str, RerankModel], kinds: Mapping[str, Kind],
                 max_items: int, default: str | None = None) -> RerankRequest:
    """A decoded JSON body of the `api` shape -> RerankRequest, or ApiError (400, or 404 for an unknown
    model) naming the field at fault."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    vllm = api == "tei" and body.get("texts") is None and "documents" in body
    try:
        return _parse_rerank("cohere" if vllm else api, body, models, kinds, max_items, default, api == "tei")
    except ApiError as exc:
        exc.dialect = "vllm" if vllm else None   # vLLM's /rerank body: vLLM's error shape
        raise


def _parse_rerank(api: str, body: dict, models: Mapping[str, RerankModel], kinds: Mapping[str, Kind],
                  max_items: int, default: str | None, optional: bool) -> RerankRequest:
    # the model is optional on /rerank (TEI's body, or vLLM's: the Cohere / Jina body on that path; a body with
    # both texts and documents is TEI's); 400 for another kind's (model_name), 404 where none answers to it,
    # 400 for a classifier of several labels
    name = model_name(body.get("model"), models, kinds, RERANKER, optional=optional, default=default)
    m = models.get(name)
    if m is None:
        raise no_such_model(name, models, RERANKER, "reranks with")
    if m.num_labels != 1:
        raise ApiError(400, f"{name!r} has {m.num_labels} labels (a classifier, not a ranker): the rerank APIs "
                       "take a model of one label, whose one score orders the documents", param="model",
                       code="wrong_model_kind")
    model = body.get("model")
    if api == "cohere":
        query = _query(body.get("query"), "query")
        docs = _documents(body.get("documents"), "documents", max_items, texts_only=False)
        if isinstance(body.get("documents"), dict) and name in kinds and not kinds[name].image_input:
            raise ApiError(400, f"documents: {name!r} is {kinds[name].label}: it ranks text documents, not image_url parts",
                           param="documents", code="wrong_modality")
        top_n = body.get("top_n")
        if top_n is not None and (not isinstance(top_n, int) or isinstance(top_n, bool)):
            raise ApiError(400, f"top_n must be an integer, got {top_n!r}", param="top_n")
        if top_n is not None and top_n < 0:
            raise ApiError(400, f"top_n must be 0 (every document) or more, got {top_n}", param="top_n")
        # vLLM's use_activation; its older `activation` is the same flag (still taken by vLLM as an alias)
        key = "use_activation" if body.get("use_activation") is not None else "activation"
        raw = not _bool(body, key, True)
        req = RerankRequest(api, model, name, query, docs, top_n or None, _bool(body, "return_documents", True),
                            "raw" if raw else "default")
    elif api == "tei":
        query = _query(body.get("query"), "query")
        docs = _documents(body.get("texts"), "texts", max_items, texts_only=True)
        given = body.get("truncation_direction", "right")
        direction = truncation_direction(given)
        if direction is None:
            raise ApiError(400, f"truncation_direction must be 'right' or 'left', not {given!r}",
                           param="truncation_direction")
        req = RerankRequest(api, model, name, query, docs, None, _bool(body, "return_text", False),
                            "raw" if _bool(body, "raw_scores", False) else "default", _bool(body, "truncate", True),
                            direction)
    elif api == "nim":
        q = body.get("query")
        if not isinstance(q, dict):
            raise ApiError(400, 'query must be an object {"text": "..."}', param="query")
        query = _query(q.get("text"), "query.text")
        docs = _documents(body.get("passages"), "passages", max_items, texts_only=False, objects_only=True)
        trunc = body.get("truncate", "NONE")
        if trunc not in NIM_TRUNCATE:
            raise ApiError(400, f"truncate must be 'NONE' or 'END', not {trunc!r}", param="truncate")
        req = RerankRequest(api, model, name, query, docs, None, False, "raw", NIM_TRUNCATE[trunc])
    else:
        raise ValueError(f"unknown rerank API {api!r}")
    extra = {k: body[k] for k in ("mode", "weights") if body.get(k) is not None}
    if extra:
        req = replace(req, scoring=extra)
    instruction = instruction_of(body, m, name)
    if instruction is not None:
        req = replace(req, instruction=instruction)
    qfield = "query.text" if api == "nim" else "query"
    check_bytes([req.query], m.max_text_bytes, qfield, qfield)
    check_bytes(req.documents, m.max_text_bytes, DOC_FIELDS[api])
    return req


def instruction_of(body: dict, m: RerankModel, name: str) -> str | None:
    """A body's `instruction` (every rank route's): a string, for a model with a prompt template (an LLM-style
    reranker's); None where the body has none."""
    instruction = body.get("instruction")
    if instruction is None:
        return None
    if not isinstance(instruction, str):
        raise ApiError(400, f"instruction must be a string, got {_short(instruction)}", param="instruction")
    if not m.takes_instruction:
        raise ApiError(400, f"{name!r} takes no instruction: it has no prompt template (an LLM-style reranker's)",
                       param="instruction")
    check_bytes([instruction], m.max_text_bytes, "instruction", "instruction")
    return instruction


def render(req: RerankRequest, scores: np.ndarray, tokens: int) -> tuple[Any, list[tuple[bytes, bytes]]]:
    """One request's scores (in document order) -> (the response document in the request's shape, extra
    headers). Sorted by score, highest first, ties in input order; top_n applied."""
    order = np.argsort(-scores, kind="stable").tolist()
    if req.top_n is not None:
        order = order[:req.top_n]
    values = scores.astype(np.float64).tolist()
    docs = req.documents
    if req.api == "cohere":
        results = [{"index": i, "relevance_score": values[i], **({"document": {"text": docs[i]}}
                                                                 if req.return_documents else {})} for i in order]
        return ({"id": str(uuid.uuid4()), "model": req.model if req.model is not None else req.served, "results": results,
                 "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}, [])
    if req.api == "tei":  # TEI reports the tokens in a header (its body is the bare list)
        return ([{"index": i, "score": values[i], **({"text": docs[i]} if req.return_documents else {})}
                 for i in order], tei_headers(tokens, len(req.query) * len(docs) + sum(map(len, docs))))
    return ({"rankings": [{"index": i, "logit": values[i]} for i in order],
             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}, [])


def _query(q: object, field: str) -> str:
    if q is None:
        raise ApiError(400, f"you must provide a {field} parameter", param=field)
    if not isinstance(q, str) or not q:
        raise ApiError(400, f"{field} must be a non-empty string", param=field)
    return q


def _documents(docs: object, field: str, max_items: int, texts_only: bool, objects_only: bool = False) -> list[str]:
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
            raise ApiError(400, f"{field}[{i}] must be {what}, got {_short(d)}", param=field)
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
                           f'{{"url": "data:image/..."}}}}, got {_short(p)}', param=field)
        out.append(url["url"])
    return out


async def answer(model, req: RerankRequest) -> Answer:
    """The model's scores, rendered; the response's size (to encode it off the event loop when
    large) counts only the documents it shows."""
    scores, tokens = await model.rerank(req)
    doc, headers = render(req, scores, tokens)
    rows = doc if isinstance(doc, list) else doc.get("results", doc.get("rankings", []))
    size = 64 * len(rows) + (sum(len(req.documents[r["index"]]) for r in rows) if req.return_documents else 0)
    return doc, size, headers
