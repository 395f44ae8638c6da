"""The embed operation's routes (#51): OpenAI's POST /v1/embeddings and /embeddings (scale_schema),
and the anchors' other dialects, pure (no server): TEI's POST /embed and /similarity, Cohere's POST
/v1/embed and /v2/embed, parsed into the one `EmbeddingsRequest` (the same model resolution, options
and checks as /v1/embeddings) and rendered back in their shapes.

- `openai` on /embeddings (TEI's and infinity's spelling of /v1/embeddings): `model` is optional (the
  only embedder, else --default-model).

- `tei` (/embed, TEI 1.9): `{inputs: str | [str] | [ids] | [[ids]], normalize?: true, truncate?: bool,
  truncation_direction?: right | left, prompt_name?, dimensions?}` -> `[[float, ...], ...]`. `truncate`
  absent or null is the build's --overflow (TEI's --auto-truncate) where the direction is right (the
  default), and cuts at the start where truncation_direction is left; true cuts on the side
  `truncation_direction` names, false refuses an over-long text. A batch is all texts or all token-id
  lists (TEI also takes both mixed in one request). `normalize` true L2-normalizes the
  vectors; false gives them as the model's reference gives them (`SentenceTransformer.encode`, which
  normalizes where the model has a Normalize module: TEI gives raw pooled vectors there).
- `tei-all` (/embed_all): /embed's body without normalize and dimensions -> each input's token
  embeddings `[[[float, ...] per token] per input]`, as `SentenceTransformer.encode(output_value=
  "token_embeddings")` gives them (every token, special ones and a prompt's included). Served by a
  build whose encoders return them (`--pooler python`); the default fused graph pools inside, so the
  default hot path pays nothing for it, and such a model answers 424 (TEI) naming the rebuild.
- `tei-similarity` (/similarity, and POST / with this body): `{inputs: {source_sentence, sentences},
  parameters?: {truncate, truncation_direction, prompt_name}}` -> each sentence's cosine similarity to
  the source sentence (`SentenceTransformer.similarity`), in order.
- `cohere-v1` / `cohere-v2`: `{texts, model?, input_type?, embedding_types?, truncate?: NONE | START |
  END, output_dimension?}`. input_type search_query / search_document take the model's query /
  document prompt, classification / clustering the prompt of that name, each only where the model has
  it (else its default prompt); embedding_types are float, int8, uint8, binary, ubinary
  (sentence-transformers' quantize_embeddings, embtrt_backend.options). v1 answers
  `embeddings_floats` without embedding_types, else `embeddings_by_type`; v2 always by type.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from collections.abc import Mapping
from typing import Any

import numpy as np

from embtrt_backend.kinds import EMBEDDER, Kind

from ...scale.gateway.dialects import tei_headers, tei_truncation as _truncation
from ...scale.gateway.errors import ApiError, empty, flag, model_name, short, text_list
from ...scale.gateway.operation import Answer, Operation
from ...scale.gateway.route_table import dialect_of
from ...scale.gateway.images import Fused, cohere_items, instruction
from .scale_late import parse as parse_late, refuse_here
from .scale_schema import (EmbeddingsModel, EmbeddingsRequest, _ids, _is_int, parse_embeddings, render as render_openai,
                           request_options, resolve_model)

# its routes and their dialects: scale.gateway.route_table (TEI's /embed_all is the token_vectors operation's:
# kinds.multivector.scale_routes, which hands an embedder's body to parse_embed_all and answer here)

COHERE_TYPES = ("float", "int8", "uint8", "binary", "ubinary")
COHERE_INPUT_TYPES = {"search_query": ("query",), "search_document": ("document", "passage"),
                      "classification": ("classification",), "clustering": ("clustering",)}


def _object(body: Any) -> dict:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _model(body: dict, models: Mapping[str, EmbeddingsModel], kinds: Mapping[str, Kind], cfg) -> tuple[str, str, dict]:
    """(the model as sent or served, the served name, the options its name carries) of a body whose `model` is optional."""
    if body.get("model") is None:
        name = model_name(None, models, kinds, EMBEDDER, optional=True, default=cfg.default_model)
        return name, name, {}
    name, raw = resolve_model(body["model"], models, kinds)
    return body["model"], name, raw


def _texts(items: Any, field: str, max_items: int, m: EmbeddingsModel, name: str) -> tuple[list[str] | None, list | None]:
    """TEI's inputs: a text, a list of texts, one token-id list, or a list of token-id lists -> (texts, ids)."""
    if items is None:
        raise ApiError(400, f"you must provide an {field} parameter", param=field)
    if isinstance(items, str):
        return [items], None
    if not isinstance(items, list):
        raise ApiError(400, f"{field} must be a string, a list of strings or token ids, got {short(items)}", param=field)
    if not items:
        raise empty(field)
    if all(_is_int(x) for x in items):
        items = [items]
    if len(items) > max_items:
        raise ApiError(400, f"batch size {len(items)} > maximum allowed batch size {max_items}", param=field)
    if all(isinstance(x, str) for x in items):
        return list(items), None
    if not all(isinstance(x, list) for x in items):
        raise ApiError(400, f"{field} must be texts or token-id lists, not both", param=field)
    if not m.token_ids:
        raise ApiError(400, "token-id input is off on this gateway: start it with --token-ids if the ids are "
                       f"{name}'s own", param=field, code="token_ids_disabled")
    return None, [_ids(x, i, name, m) for i, x in enumerate(items)]


def parse_tei(body: Any, models: Mapping[str, EmbeddingsModel], kinds: Mapping[str, Kind], cfg) -> EmbeddingsRequest:
    body = _object(body)
    model, name, raw = _model(body, models, kinds, cfg)
    m = models[name]
    texts, ids = _texts(body.get("inputs"), "inputs", cfg.max_items, m, name)
    raw.update({k: body[k] for k in ("prompt_name", "dimensions") if body.get(k) is not None})
    truncate = _truncation(body.get("truncate"), body.get("truncation_direction"))
    if truncate is not None:
        raw["truncate"] = truncate
    if ids is not None and raw.get("prompt_name") is not None:
        raise ApiError(400, "token-id input is embedded as given: prompt_name applies to texts only", param="prompt_name")
    return EmbeddingsRequest(model, name, texts, ids, "float", request_options(m, raw), "tei", flag(body, "normalize", True),
                             late=parse_late(body, texts, "inputs", raw, cfg.max_items))


def parse_embed_all(body: Any, models: Mapping[str, EmbeddingsModel], kinds: Mapping[str, Kind], cfg) -> EmbeddingsRequest:
    """TEI's /embed_all: /embed's body without normalize and dimensions (which do not apply to token vectors)."""
    req = parse_tei(body, models, kinds, cfg)
    if req.late is not None:
        raise ApiError(400, "late chunking gives a vector per chunk (/embed, /v1/embeddings), not token embeddings",
                       param="late_chunking")
    if req.options.dimensions is not None:
        raise ApiError(400, "dimensions does not apply to token embeddings", param="dimensions")
    return replace(req, api="tei-all", normalize=False)


@dataclass(frozen=True)
class EmbedderSchema(EmbeddingsModel):
    """An embedder's schema: TEI's /embed_all body is its own (the token_vectors operation, which a multi-vector
    model serves too, hands such a body to the model's schema when it has this parser; its gateway model's
    `answer_embed_all` answers it)."""

    def parse_embed_all(self, body: Any, models: Mapping, kinds: Mapping[str, Kind], cfg) -> EmbeddingsRequest:
        return parse_embed_all(body, models, kinds, cfg)


def parse_similarity(body: Any, models: Mapping[str, EmbeddingsModel], kinds: Mapping[str, Kind], cfg) -> EmbeddingsRequest:
    body = _object(body)
    refuse_here(body, "/similarity")
    model, name, raw = _model(body, models, kinds, cfg)
    m = models[name]
    inputs = body.get("inputs")
    if not isinstance(inputs, dict):
        raise ApiError(400, 'inputs must be an object {"source_sentence": "...", "sentences": [...]}', param="inputs")
    source, sentences = inputs.get("source_sentence"), inputs.get("sentences")
    if not isinstance(source, str):
        raise ApiError(400, "inputs.source_sentence must be a string", param="inputs.source_sentence")
    if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
        raise ApiError(400, "inputs.sentences must be a list of strings", param="inputs.sentences")
    if not sentences:
        raise empty("inputs.sentences")
    if len(sentences) + 1 > cfg.max_items:
        raise ApiError(400, f"batch size {len(sentences) + 1} > maximum allowed batch size {cfg.max_items}",
                       param="inputs.sentences")
    params = body.get("parameters") or {}
    if not isinstance(params, dict):
        raise ApiError(400, "parameters must be an object", param="parameters")
    if params.get("prompt_name") is not None:
        raw["prompt_name"] = params["prompt_name"]
    truncate = _truncation(params.get("truncate"), params.get("truncation_direction"))
    if truncate is not None:
        raw["truncate"] = truncate
    return EmbeddingsRequest(model, name, [source, *sentences], None, "float", request_options(m, raw), "similarity")


def parse_cohere(version: str, body: Any, models: Mapping[str, EmbeddingsModel], kinds: Mapping[str, Kind],
                 cfg) -> EmbeddingsRequest:
    body = _object(body)
    refuse_here(body, "Cohere's embed")
    if body.get("max_tokens") is not None:
        raise ApiError(400, "max_tokens is not served by this gateway (inputs are cut by truncate)", param="max_tokens")
    model, name, raw = _model(body, models, kinds, cfg)
    m = models[name]
    found = cohere_items(body, version, m, name, kinds.get(name, EMBEDDER), cfg.max_items)   # images / inputs
    texts, media = found if found is not None else (text_list(body.get("texts"), "texts", cfg.max_items, single=False), ())
    field = "texts" if found is None else "images" if body.get("images") is not None else "inputs"
    input_type = body.get("input_type")
    if input_type == "image":
        if not media:
            raise ApiError(400, "input_type image is for images: send them in images (or inputs' image_url parts)",
                           param="input_type")
        input_type = None   # no prompt: prompts apply to texts only
    if input_type is not None:
        if not isinstance(input_type, str) or input_type not in COHERE_INPUT_TYPES:
            raise ApiError(400, f"input_type must be one of {', '.join(COHERE_INPUT_TYPES)}, not {short(input_type)}",
                           param="input_type")
        prompt = next((p for p in COHERE_INPUT_TYPES[input_type] if p in m.options.prompts), None)
        if prompt is not None:
            if raw.get("prompt_name", prompt) != prompt:
                raise ApiError(400, f"input_type {input_type!r} disagrees with the model name {model!r}", param="input_type")
            raw["prompt_name"] = prompt
    truncate = body.get("truncate") or "END"   # absent or null: Cohere's default
    if not isinstance(truncate, str) or truncate.upper() not in ("NONE", "START", "END"):
        raise ApiError(400, f"truncate must be NONE, START or END, not {short(truncate)}", param="truncate")
    raw["truncate"] = truncate.upper()
    types = body.get("embedding_types")
    if types is None and version == "cohere-v2":
        types = ["float"]
    if types is not None and (not isinstance(types, list) or not types
                              or not all(isinstance(t, str) and t in COHERE_TYPES for t in types)):
        raise ApiError(400, f"embedding_types must be a non-empty list of {', '.join(COHERE_TYPES)}, got {short(types)}",
                       param="embedding_types")
    names = {"embedding_type": "embedding_types", "dimensions": "output_dimension", "prompt_name": "input_type"}
    width = body.get("output_dimension")
    asked = instruction(body, m, name)
    if types is None:   # v1's floats: the vectors as the options give them
        return EmbeddingsRequest(model, name, texts, None, "float",
                                 request_options(m, {**raw, "dimensions": width}, names), version, media=media,
                                 media_field=field, instruction=asked)
    # by type: full-width floats from the model, each type finished from them (one forward pass for all)
    finishes = tuple((t, request_options(m, {**raw, "embedding_type": t, "dimensions": width}, names))
                     for t in dict.fromkeys(types))
    return EmbeddingsRequest(model, name, list(texts), None, "float", request_options(m, raw, names), version,
                             types=finishes, media=media, media_field=field, instruction=asked)


PARSERS = {"tei": parse_tei, "tei-all": parse_embed_all, "tei-similarity": parse_similarity,
           "cohere-v1": lambda b, ms, ks, cfg: parse_cohere("cohere-v1", b, ms, ks, cfg),
           "cohere-v2": lambda b, ms, ks, cfg: parse_cohere("cohere-v2", b, ms, ks, cfg)}


def _unit(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.float32, copy=False)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def parse(models: Mapping[str, EmbeddingsModel], kinds: Mapping[str, Kind], cfg, path: str, body: Any) -> EmbeddingsRequest:
    """A body of the path's dialect -> EmbeddingsRequest."""
    if path == "/v1/embeddings":
        return parse_embeddings(body, models, cfg.max_items, kinds)
    if path == "/embeddings":
        return parse_embeddings(body, models, cfg.max_items, kinds, optional=True, default=cfg.default_model)
    return PARSERS[dialect_of(path)](body, models, kinds, cfg)


async def answer(model, req: EmbeddingsRequest) -> Answer:
    """The model's vectors in the request's dialect."""
    if req.api == "tei-all":   # each input's token embeddings (a --pooler python build's encoders)
        rows, tokens = await model.token_vectors(req.texts, req.ids, req.options)
        return rows, 8 * sum(r.size for r in rows), tei_headers(tokens, sum(map(len, req.texts or ())))
    if req.late is not None:   # one pass over the document, each chunk pooled from its own tokens
        late_chunks = getattr(model, "late_chunks", None)
        if late_chunks is None:
            raise ApiError(400, f"late chunking is served for text embedders; {req.served} is a {model.kind.name}",
                           param="late_chunking")
        vecs, tokens = await late_chunks(req.late.document, list(req.late.spans), req.options, req.late.field)
    elif req.instruction is not None or req.item_names:   # a VLM embedder's items: the request's instruction, names
        vecs, tokens = await model.embed_items(req.texts, req.media, req.options, req.media_field, req.instruction,
                                               req.item_names)
    elif req.media:   # a text-and-image model's images (and texts), each item in its own modality
        vecs, tokens = await model.embed_items(req.texts, req.media, req.options, req.media_field)
    else:
        vecs, tokens = await model.embed(req.texts, req.ids, req.options)
    if req.api == "openai":
        return render_openai(req, vecs, tokens)
    return render(model, req, vecs, tokens)


def render(model, req: EmbeddingsRequest, vecs: np.ndarray, tokens: int) -> Answer:
    """One request's vectors (as its options ask; Cohere's: full-width floats) in its dialect's shape."""
    chars = sum(map(len, req.texts or ()))
    if req.api == "tei":
        out = _unit(vecs) if req.normalize and vecs.dtype == np.float32 else vecs
        return out, 8 * out.size, tei_headers(tokens, chars)
    if req.api == "similarity":
        unit = _unit(vecs)
        return (unit[1:] @ unit[0]).astype(np.float64).tolist(), 16 * len(vecs), tei_headers(tokens, chars)
    version = req.api[-1]
    images = sum(x is not None for x in req.media)
    meta = {"api_version": {"version": version},
            "billed_units": {"input_tokens": tokens, **({"images": images} if images else {})}}
    texts = [t for k, t in enumerate(req.texts or ()) if not req.media or req.media[k] is None or isinstance(req.media[k], Fused)]
    doc: dict[str, Any] = {"id": str(uuid.uuid4()), "texts": texts, "meta": meta}
    if not req.types:   # v1 without embedding_types
        doc.update(embeddings=vecs, response_type="embeddings_floats")
    else:
        finish = model.served.options.finish
        doc.update(embeddings={t: finish(vecs, opts) for t, opts in req.types}, response_type="embeddings_by_type")
    return doc, 8 * vecs.size * max(1, len(req.types)), []


OPERATIONS = (Operation("embed", EMBEDDER.metric_route, "latency", parse, answer, needs=(("embed",),)),)
