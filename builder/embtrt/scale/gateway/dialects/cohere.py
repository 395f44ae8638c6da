"""Cohere's dialect: its error body and its request shapes of every operation it has.

- embed, `cohere-v1` / `cohere-v2` (POST /v1/embed, /v2/embed): `{texts, model?, input_type?, embedding_types?,
  truncate?: NONE | START | END, output_dimension?}` (and `images`, or v2's `inputs` of content parts, for a model
  that takes images: scale/gateway/images.py). input_type search_query / search_document take the model's query /
  document prompt, classification / clustering the prompt of that name, each only where the model has it (else
  its default prompt); embedding_types are float, int8, uint8, binary, ubinary (sentence-transformers'
  quantize_embeddings, embtrt_backend.options). v1 answers `embeddings_floats` without embedding_types, else
  `embeddings_by_type`; v2 always by type.

- rank, `cohere`: Cohere / Jina / vLLM, POST /v1/rerank and /v2/rerank (and vLLM's body on /rerank: tei.py):
  `{model, query, documents, top_n?, return_documents?, use_activation?}` (documents: strings, or objects with a
  string `text`; vLLM's `{"content": [image_url parts]}` for a model whose input takes images) -> `{id, model,
  usage, results: [{index, relevance_score, document?}]}`; scores as `CrossEncoder.rank` gives them (the model's
  own activation; vLLM's `use_activation: false`: the raw logits); `top_n` 0 is every document (vLLM's default);
  each result carries its `document` unless `return_documents` is false (vLLM always sends it, Jina by default;
  Cohere's clients take it as an optional field).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
from embtrt_backend.kinds import Kind

from ..errors import ApiError, flag, json_object, short, text_list
from ..images import Fused, cohere_items, instruction
from ..operation import Answer, Shape
from ..ops import embed, rank
from ..ops.embed import EmbeddingsModel, EmbeddingsRequest
from ..ops.late import refuse_here
from ..ops.rank import RerankModel, RerankRequest


def error(exc: ApiError) -> tuple[int, dict]:
    """Cohere's `{"message"}` with the status."""
    return exc.status, {"message": exc.message}

TYPES = ("float", "int8", "uint8", "binary", "ubinary")
INPUT_TYPES = {"search_query": ("query",), "search_document": ("document", "passage"),
               "classification": ("classification",), "clustering": ("clustering",)}


def parse_rank(body: Any, models: Mapping[str, RerankModel], kinds: Mapping[str, Kind], max_items: int,
               default: str | None = None, optional: bool = False) -> RerankRequest:
    """Cohere's rerank body -> RerankRequest (`optional`: the model may be left out, as on vLLM's /rerank)."""
    body = json_object(body)
    name, m = rank.ranker(body, models, kinds, optional, default)
    query = rank.query(body.get("query"), "query")
    docs = rank.documents(body.get("documents"), "documents", max_items, texts_only=False)
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
    raw = not flag(body, key, True)
    req = RerankRequest("cohere", body.get("model"), name, query, docs, top_n or None, flag(body, "return_documents", True),
                        "raw" if raw else "default")
    return rank.finish(req, body, m, "query", "documents")


def render_rank(req: RerankRequest, scores: np.ndarray, tokens: int) -> tuple[Any, list]:
    order, values = rank.ranked(req, scores)
    results = [{"index": i, "relevance_score": values[i], **({"document": {"text": req.documents[i]}}
                                                             if req.return_documents else {})} for i in order]
    return ({"id": str(uuid.uuid4()), "model": req.model if req.model is not None else req.served, "results": results,
             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}, [])


def parse_embed(version: str, body: Any, models: Mapping[str, EmbeddingsModel], kinds: Mapping[str, Kind],
                 cfg) -> EmbeddingsRequest:
    body = json_object(body)
    refuse_here(body, "Cohere's embed")
    if body.get("max_tokens") is not None:
        raise ApiError(400, "max_tokens is not served by this gateway (inputs are cut by truncate)", param="max_tokens")
    model, name, raw = embed.optional_model(body, models, kinds, cfg)
    m = models[name]
    found = cohere_items(body, version, m, name, kinds.get(name, embed.EMBEDDER), cfg.max_items)   # images / inputs
    texts, media = found if found is not None else (text_list(body.get("texts"), "texts", cfg.max_items, single=False), ())
    field = "texts" if found is None else "images" if body.get("images") is not None else "inputs"
    input_type = body.get("input_type")
    if input_type == "image":
        if not media:
            raise ApiError(400, "input_type image is for images: send them in images (or inputs' image_url parts)",
                           param="input_type")
        input_type = None   # no prompt: prompts apply to texts only
    if input_type is not None:
        if not isinstance(input_type, str) or input_type not in INPUT_TYPES:
            raise ApiError(400, f"input_type must be one of {', '.join(INPUT_TYPES)}, not {short(input_type)}",
                           param="input_type")
        prompt = next((p for p in INPUT_TYPES[input_type] if p in m.options.prompts), None)
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
                              or not all(isinstance(t, str) and t in TYPES for t in types)):
        raise ApiError(400, f"embedding_types must be a non-empty list of {', '.join(TYPES)}, got {short(types)}",
                       param="embedding_types")
    names = {"embedding_type": "embedding_types", "dimensions": "output_dimension", "prompt_name": "input_type"}
    width = body.get("output_dimension")
    asked = instruction(body, m, name)
    if types is None:   # v1's floats: the vectors as the options give them
        return EmbeddingsRequest(model, name, texts, None, "float",
                                 embed.request_options(m, {**raw, "dimensions": width}, names), version, media=media,
                                 media_field=field, instruction=asked)
    # by type: full-width floats from the model, each type finished from them (one forward pass for all)
    finishes = tuple((t, embed.request_options(m, {**raw, "embedding_type": t, "dimensions": width}, names))
                     for t in dict.fromkeys(types))
    return EmbeddingsRequest(model, name, list(texts), None, "float", embed.request_options(m, raw, names), version,
                             types=finishes, media=media, media_field=field, instruction=asked)


async def answer_embed(model, req: EmbeddingsRequest) -> Answer:
    """One request's vectors (full-width floats; each asked type finished from them) in Cohere's shape."""
    vecs, tokens = await embed.vectors(model, req)
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


SHAPES = {
    ("embed", "cohere-v1"): Shape(lambda models, kinds, cfg, path, body: parse_embed("cohere-v1", body, models, kinds, cfg),
                                  answer_embed),
    ("embed", "cohere-v2"): Shape(lambda models, kinds, cfg, path, body: parse_embed("cohere-v2", body, models, kinds, cfg),
                                  answer_embed),
    ("rank", "cohere"): Shape(lambda models, kinds, cfg, path, body: parse_rank(body, models, kinds, cfg.max_items),
                              rank.answerer(render_rank)),
}
