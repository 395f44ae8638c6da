"""The token-vector operations' routes (#52), pure (no server):

- `token_vectors`: TEI's POST /embed_all and vLLM's POST /pooling (`task: token_embed`). A model whose gateway
  class parses /embed_all itself (`parse_embed_all`, `answer_embed_all`: an embedder's, a --pooler python
  build's token embeddings) answers it so; a
  multi-vector model's is encode_document's vectors (TEI returns raw hidden states: docs/multivector.md),
  `input_type: "query"` (an embtrt field) encode_query's. /pooling: `{model?, input: str | [str], task?:
  "token_embed", embedding_mode?: query | document (vLLM PR #44530's field; default document),
  encoding_format?: float | base64, embed_dtype?: float32 | float16, truncate_prompt_tokens?: -1}` ->
  vLLM's `{id, object: "list", created, model, data: [{index, object: "pooling", data}], usage}`, `data`
  a list of vectors or (base64) the row-major bytes of [count, dim] in embed_dtype, little-endian.
  A model whose input takes images (a page-image retriever) also takes vLLM's multimodal `messages` on /pooling:
  one user message whose content is one image_url part (a data URI) -> that image's token vectors.
- `encode`: POST /v1/encode, FlagEmbedding's BGEM3FlagModel.encode over HTTP: `{model?, input: str |
  [str], return_dense?: true, return_sparse?: false, return_colbert_vecs?: false, encoding_format?,
  embed_dtype?}` -> `{object: "list", model, data: [{index, dense_vecs?, lexical_weights?: {token id: w},
  colbert_vecs?}], usage}`, all asked outputs from one encoder pass. A ColBERT model answers
  colbert_vecs only (with `input_type` query | document).
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from embtrt_backend.kinds import MULTIVECTOR, TOKEN_VECTORS, Kind
from embtrt_backend.kinds.multivector.core import SIDES

from ...scale.gateway.dialects import tei_headers, tei_truncation
from ...scale.gateway.errors import ApiError, flag, implied_model, no_such_model, short, text_list, wrong_kind
from ...scale.gateway.operation import Answer, Operation
from ...scale.gateway.route_table import dialect_of
from .scale import M3_ALL, VECTORS

DTYPES = {"float32": np.float32, "float16": np.float16}


@dataclass(frozen=True)
class TokenRequest:
    api: str                  # tei-all | vllm-pooling | encode
    model: str | None         # as sent
    served: str
    texts: list[str]
    side: str = "document"
    prompt_name: str | None = None
    truncate: str | None = None
    outputs: tuple[str, ...] = VECTORS
    encoding: str = "float"   # float | base64
    dtype: str = "float32"
    images: tuple[str, ...] = ()   # /pooling's `messages`: images as data URIs (a model whose input takes images)


def _resolve(body: dict, models: Mapping, kinds: Mapping[str, Kind], cfg, operation: str = "token_vectors") -> str:
    """The body's model (optional: the only model, else --default-model) -> a served name; 400 (a model of a kind that
    does not serve `operation`) / 404 otherwise."""
    name = body.get("model")
    if name is None and not models:
        raise ApiError(400, f"this gateway serves no {MULTIVECTOR.noun} (token vectors of an embedder: TEI's /embed_all)",
                       param="model", code="wrong_operation")
    if name is None:
        name = implied_model(models, cfg.default_model)
        if name is None:
            raise ApiError(400, f"you must provide a model parameter (this gateway serves several: "
                           f"{', '.join(map(repr, models))})", param="model")
    if not isinstance(name, str):
        raise ApiError(400, "model must be a string", param="model")
    if name in kinds and (not kinds[name].has(TOKEN_VECTORS) or operation not in kinds[name].operations):
        raise wrong_kind(name, kinds[name], MULTIVECTOR)   # a kind with the token-vector head serving the operation
    if name not in models:
        raise no_such_model(name, models, MULTIVECTOR, "serves token vectors of")
    return name


def _format(body: dict) -> tuple[str, str]:
    fmt, dtype = body.get("encoding_format") or "float", body.get("embed_dtype") or "float32"
    if fmt not in ("float", "base64"):
        raise ApiError(400, f"encoding_format must be 'float' or 'base64', not {short(fmt)}", param="encoding_format")
    if dtype not in DTYPES:
        raise ApiError(400, f"embed_dtype must be float32 or float16, not {short(dtype)}", param="embed_dtype")
    return fmt, dtype


def _side(value: object, field: str) -> str:
    if value is None:
        return "document"
    if not isinstance(value, str) or value.lower() not in SIDES:
        raise ApiError(400, f"{field} must be 'query' or 'document' (passage, corpus), not {short(value)}", param=field)
    return SIDES[value.lower()]


def parse_tokens(models: Mapping, kinds: Mapping[str, Kind], cfg, path: str, body: Any):
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    api = dialect_of(path)
    sent = body.get("model")
    implied = sent if isinstance(sent, str) else implied_model(models, cfg.default_model)
    if sent is None and implied is None and len(models) > 1:   # TEI's bodies name no model: which is ambiguous
        raise ApiError(400, "this gateway serves several models with token vectors (" + ", ".join(map(repr, models))
                       + "): name one with model, or start it with --default-model", param="model")
    own = getattr(models.get(implied or ""), "parse_embed_all", None)
    if api == "tei-all" and own is not None:   # a model whose schema parses /embed_all itself (an embedder's)
        return own(body, {n: m for n, m in models.items() if hasattr(m, "parse_embed_all")}, kinds, cfg)
    multi = {n: m for n, m in models.items() if kinds[n].has(TOKEN_VECTORS)}
    name = _resolve(body, multi, kinds, cfg)
    if api == "tei-all":
        inputs = body.get("inputs")
        texts = text_list(inputs, "inputs", cfg.max_items, tei=True,
                          hint=" (a multi-vector model takes texts, not token ids)")
        truncate = tei_truncation(body.get("truncate"), body.get("truncation_direction"))
        prompt = body.get("prompt_name")
        if prompt is not None and not isinstance(prompt, str):
            raise ApiError(400, "prompt_name must be a string", param="prompt_name")
        return TokenRequest(api, sent, name, texts, _text_side(body, "input_type", name, kinds[name]), prompt, truncate)
    task = body.get("task")
    if task is not None and task != "token_embed":
        raise ApiError(400, f"task {short(task)}: a multi-vector model serves token_embed on /pooling", param="task")
    cut = body.get("truncate_prompt_tokens")
    if cut is not None and cut != -1:
        raise ApiError(400, "truncate_prompt_tokens: only -1 (cut at the model's length) is served", param="truncate_prompt_tokens")
    fmt, dtype = _format(body)
    if body.get("messages") is not None:
        if body.get("input") is not None:
            raise ApiError(400, "send input (texts) or messages (an image), not both", param="messages")
        images = message_images(body["messages"], name, kinds[name])
        return TokenRequest(api, sent, name, [], encoding=fmt, dtype=dtype, images=images)
    texts = text_list(body.get("input"), "input", cfg.max_items)
    return TokenRequest(api, sent, name, texts, _text_side(body, "embedding_mode", name, kinds[name]),
                        encoding=fmt, dtype=dtype)


def _text_side(body: dict, field: str, name: str, kind: Kind) -> str:
    """A text's side; a model whose input takes images (a page-image retriever) reads every text as a query: a text
    sent as a document is refused, as its front door refuses it (its documents are images)."""
    side = _side(body.get(field), field)
    if kind.image_input and body.get(field) is not None and side != "query":
        raise ApiError(400, f"{field} {short(body.get(field))}: {name!r} is {kind.label}: a text is a query (its documents "
                       "are images: vLLM's /pooling messages)", param=field)
    return side


def message_images(messages: Any, name: str, kind: Kind) -> tuple[str, ...]:
    """vLLM's /pooling `messages` (one user message whose content is one image_url part: one image's token vectors,
    for a model whose input takes images) -> its data URI; a 400 naming the field otherwise."""
    if not kind.image_input:
        raise ApiError(400, f"messages: {name!r} is {kind.label}: it takes texts in input", param="messages",
                       code="wrong_modality")
    msg = messages[0] if isinstance(messages, list) and len(messages) == 1 and isinstance(messages[0], dict) else None
    parts = msg.get("content") if msg is not None and msg.get("role", "user") == "user" else None
    if not isinstance(parts, list) or len(parts) != 1 or not isinstance(parts[0], dict) \
            or parts[0].get("type") != "image_url" or not isinstance(parts[0].get("image_url"), dict):
        raise ApiError(400, 'messages must be one user message whose content is one image_url part '
                       f'([{{"role": "user", "content": [{{"type": "image_url", "image_url": {{"url": "data:..."}}}}]}}]), '
                       f"got {short(messages)}", param="messages")
    return (parts[0]["image_url"].get("url"),)


def parse_encode(models: Mapping, kinds: Mapping[str, Kind], cfg, path: str, body: Any) -> TokenRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    name = _resolve(body, models, kinds, cfg, "encode")
    m3 = models[name].layout == "m3"
    dense, sparse = flag(body, "return_dense", m3), flag(body, "return_sparse", False)
    colbert = flag(body, "return_colbert_vecs", not m3)
    if not m3 and (dense or sparse):
        raise ApiError(400, f"{name!r} is a ColBERT model: it has colbert_vecs only", param="return_dense" if dense else "return_sparse")
    outputs = (("DENSE",) if dense else ()) + (("SPARSE_INDICES", "SPARSE_VALUES") if sparse else ()) + (VECTORS if colbert else ())
    if not outputs:
        raise ApiError(400, "ask for at least one of return_dense, return_sparse, return_colbert_vecs", param="return_dense")
    fmt, dtype = _format(body)
    texts = text_list(body.get("input"), "input", cfg.max_items)
    return TokenRequest("encode", body.get("model"), name, texts, _side(body.get("input_type"), "input_type"),
                        outputs=tuple(o for o in M3_ALL if o in outputs), encoding=fmt, dtype=dtype)


def _vectors(v: np.ndarray, req: TokenRequest) -> Any:
    a = v.astype(DTYPES[req.dtype], copy=False)
    if req.encoding == "base64":
        return base64.b64encode(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()).decode("ascii")
    return a


async def answer_tokens(model, req) -> Answer:
    if not isinstance(req, TokenRequest):   # a model's own /embed_all (an embedder's)
        return await model.answer_embed_all(req)
    if req.images:   # checked by the parser: the model's input takes images
        got = await model.encode_images(list(req.images), "messages")
    else:
        got = await model.encode_texts(req.texts, req.side, req.outputs, "inputs" if req.api == "tei-all" else "input",
                                       req.prompt_name, req.truncate)
    size = 8 * sum(v.size for v in got.vectors)
    if req.api == "tei-all":
        return got.vectors, size, tei_headers(got.tokens, sum(map(len, req.texts)))
    data = [{"index": i, "object": "pooling", "data": _vectors(v, req)} for i, v in enumerate(got.vectors)]
    return ({"id": f"pool-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
             "model": req.model or req.served, "data": data,
             "usage": {"prompt_tokens": got.tokens, "total_tokens": got.tokens, "completion_tokens": 0,
                       "prompt_tokens_details": None}}, size, [])


async def answer_encode(model, req: TokenRequest) -> Answer:
    got = await model.encode_texts(req.texts, req.side, req.outputs, "input")
    data = []
    for i in range(len(req.texts)):
        row: dict[str, Any] = {"index": i}
        if got.dense is not None:
            row["dense_vecs"] = _vectors(got.dense[i], req)
        if got.sparse is not None:
            ids, w = got.sparse[i]
            row["lexical_weights"] = {str(int(k)): float(x) for k, x in zip(ids, w)}
        if got.vectors is not None:
            row["colbert_vecs"] = _vectors(got.vectors[i], req)
        data.append(row)
    size = 8 * (sum(v.size for v in got.vectors or ()) + (got.dense.size if got.dense is not None else 0)) + 32 * len(data)
    return ({"object": "list", "model": req.model or req.served, "data": data,
             "usage": {"prompt_tokens": got.tokens, "total_tokens": got.tokens}}, size, [])


# token_vectors serves two kinds (an embedder's /embed_all too): its metric label is the operation's
OPERATIONS = (Operation("token_vectors", "token_vectors", "latency", parse_tokens, answer_tokens,
                        needs=(("encode_texts",), ("token_vectors",))),   # a multi-vector model's, an embedder's
              Operation("encode", MULTIVECTOR.metric_route, "latency", parse_encode, answer_encode, needs=(("encode_texts",),)))
