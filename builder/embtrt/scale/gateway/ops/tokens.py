"""The token-vector operations (#52, #69 item 2): what their requests are, whatever the dialect, and what a model
serving them is asked.

- `token_vectors`: each input's token vectors (TEI's /embed_all: dialects/tei.py; vLLM's /pooling: dialects/vllm.py).
  A model with the token-vectors head answers encode_document's vectors (`input_type` / `embedding_mode` query:
  encode_query's); an embedder answers TEI's /embed_all with its token embeddings (its /embed body: dialects/tei.py).
- `encode`: FlagEmbedding's BGEM3FlagModel.encode over HTTP (POST /v1/encode: dialects/embtrt.py).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from embtrt_backend.kinds import TOKEN_VECTORS, Kind, of_operation
from embtrt_backend.token_vectors import SIDES, VECTORS

from ..errors import ApiError, implied_model, no_such_model, short, wrong_kind
from ..operation import Declared

NAME = "token_vectors"
OWNER = of_operation(NAME)   # the kind its messages name ("this gateway serves no multi-vector model")
# token_vectors serves several kinds (an embedder's /embed_all too): its metric label is the operation's
OPERATIONS = (Declared(NAME, NAME, "latency", needs=(("encode_texts",), ("token_vectors",))),   # a head's model, an embedder's
              Declared("encode", of_operation("encode").metric_route, "latency", needs=(("encode_texts",),)))
DTYPES = {"float32": np.float32, "float16": np.float16}


@dataclass(frozen=True)
class TokenRequest:
    api: str                  # tei-all | vllm-pooling | embtrt (encode)
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


def resolve(body: dict, models: Mapping, kinds: Mapping[str, Kind], cfg, operation: str = "token_vectors") -> str:
    """The body's model (optional: the only model, else --default-model) -> a served name; 400 (a model of a kind that
    does not serve `operation`) / 404 otherwise."""
    name = body.get("model")
    if name is None and not models:
        raise ApiError(400, f"this gateway serves no {OWNER.noun} (token vectors of an embedder: TEI's /embed_all)",
                       param="model", code="wrong_operation")
    if name is None:
        name = implied_model(models, cfg.default_model)
        if name is None:
            raise ApiError(400, f"you must provide a model parameter (this gateway serves several: "
                           f"{', '.join(map(repr, models))})", param="model")
    if not isinstance(name, str):
        raise ApiError(400, "model must be a string", param="model")
    if name in kinds and (not kinds[name].has(TOKEN_VECTORS) or operation not in kinds[name].operations):
        raise wrong_kind(name, kinds[name], OWNER)   # a kind with the token-vector head serving the operation
    if name not in models:
        raise no_such_model(name, models, OWNER, "serves token vectors of")
    return name


def encoding(body: dict) -> tuple[str, str]:
    fmt, dtype = body.get("encoding_format") or "float", body.get("embed_dtype") or "float32"
    if fmt not in ("float", "base64"):
        raise ApiError(400, f"encoding_format must be 'float' or 'base64', not {short(fmt)}", param="encoding_format")
    if dtype not in DTYPES:
        raise ApiError(400, f"embed_dtype must be float32 or float16, not {short(dtype)}", param="embed_dtype")
    return fmt, dtype


def side(value: object, field: str) -> str:
    if value is None:
        return "document"
    if not isinstance(value, str) or value.lower() not in SIDES:
        raise ApiError(400, f"{field} must be 'query' or 'document' (passage, corpus), not {short(value)}", param=field)
    return SIDES[value.lower()]


def sent_model(body: dict, models: Mapping, cfg) -> tuple[Any, str | None]:
    """(the body's `model` as sent, the model it names or implies); 400 where it names none and several are served
    (TEI's bodies name no model: which is ambiguous)."""
    sent = body.get("model")
    implied = sent if isinstance(sent, str) else implied_model(models, cfg.default_model)
    if sent is None and implied is None and len(models) > 1:
        raise ApiError(400, "this gateway serves several models with token vectors (" + ", ".join(map(repr, models))
                       + "): name one with model, or start it with --default-model", param="model")
    return sent, implied


def heads(models: Mapping, kinds: Mapping[str, Kind]) -> dict:
    """The models with the token-vectors head."""
    return {n: m for n, m in models.items() if kinds[n].has(TOKEN_VECTORS)}


def text_side(body: dict, field: str, name: str, kind: Kind) -> str:
    """A text's side; a model whose input takes images (a page-image retriever) reads every text as a query: a text
    sent as a document is refused, as its front door refuses it (its documents are images)."""
    got = side(body.get(field), field)
    if kind.image_input and body.get(field) is not None and got != "query":
        raise ApiError(400, f"{field} {short(body.get(field))}: {name!r} is {kind.label}: a text is a query (its documents "
                       "are images: vLLM's /pooling messages)", param=field)
    return got


def vectors(v: np.ndarray, req: TokenRequest) -> Any:
    a = v.astype(DTYPES[req.dtype], copy=False)
    if req.encoding == "base64":
        return base64.b64encode(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()).decode("ascii")
    return a


async def encode(model, req: TokenRequest):
    """The model's token vectors of the request's texts, or of its images (checked by the parser: the model's
    input takes images)."""
    if req.images:
        return await model.encode_images(list(req.images), "messages")
    return await model.encode_texts(req.texts, req.side, req.outputs, "inputs" if req.api == "tei-all" else "input",
                                    req.prompt_name, req.truncate)
