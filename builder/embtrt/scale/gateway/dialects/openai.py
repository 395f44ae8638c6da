"""OpenAI's dialect: its error body and its request shapes of every operation it has.

- embed, `openai`: POST /v1/embeddings, and /embeddings (TEI's and infinity's spelling, whose clients may send no
  `model`: the only embedder, else --default-model). `{model, input, encoding_format?, dimensions?, ...}`; `input`
  a string, a list of strings, a list of token ids, or a list of token-id lists. The other anchors' fields on it:
  NIM's `input_type` (and `truncate`), infinity's and NIM's `modality` (images as data URIs), vLLM's chat-style
  `messages` (one conversation, one vector; the system message is a VLM embedder's instruction), Jina's
  `late_chunking` and embtrt's `chunk_spans`, `prompt_name`, `instruction`.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from embtrt_backend.kinds import Kind

from ..errors import NO_KINDS, ApiError, check_bytes, json_object
from ..images import Fused, instruction, media, messages_input, modalities, takes_images
from ..operation import Answer, Shape
from ..ops import embed
from ..ops.embed import EmbeddingsModel, EmbeddingsRequest
from ..ops.late import parse as parse_late

ENCODING_FORMATS = ("float", "base64")


def error(exc: ApiError) -> tuple[int, dict]:
    """OpenAI's `{"error": {message, type, param, code}}` with the gateway's status."""
    return exc.status, exc.body()


def parse_embeddings(body: Any, models: Mapping[str, EmbeddingsModel], max_items: int,
                     kinds: Mapping[str, Kind] = NO_KINDS, optional: bool = False,
                     default: str | None = None) -> EmbeddingsRequest:
    """A decoded JSON body -> EmbeddingsRequest, or ApiError (400, or 404 for an unknown model) naming
    the parameter at fault; a reranker's or sparse encoder's name (`rerankers`, `sparse`) is a 400 naming
    the routes that serve it. `optional`: a body without `model` goes to the only embedder, else to
    `default` (POST /embeddings, TEI's and infinity's path, whose clients may send none)."""
    body = json_object(body)
    name, raw = embed.resolve_model(body.get("model"), models, kinds, optional, default)
    model: str = body.get("model") or name  # a string: resolve_model refused anything else
    m = models[name]
    fmt = body.get("encoding_format", "float")
    if fmt not in ENCODING_FORMATS:
        raise ApiError(400, f"encoding_format must be 'float' or 'base64', not {fmt!r}", param="encoding_format")
    from embtrt_backend.options import OPTION_NAMES

    for key in OPTION_NAMES:
        if body.get(key) is not None:
            if key in raw and raw[key] != body[key]:
                raise ApiError(400, f"{key} {body[key]!r} disagrees with the model name {model!r}", param=key)
            raw[key] = body[key]
    if takes_images(m) and isinstance(raw.get("input_type"), str):
        from embtrt_backend.options import INPUT_TYPES

        # NIM sends input_type (query / passage) with every request; a text-and-image model without that prompt
        # (CLIP's are empty or absent) has nothing to apply: no prompt, as for Cohere's input_type
        names = INPUT_TYPES.get(raw["input_type"].lower(), ())
        if names and not any(n in m.options.prompts for n in names):
            raw.pop("input_type")
    opts = embed.request_options(m, raw)

    def request(texts: list[str] | None, ids: list[list[int]] | None) -> EmbeddingsRequest:
        return EmbeddingsRequest(model, name, texts, ids, fmt, opts)

    asked = instruction(body, m, name)
    if body.get("messages") is not None:   # vLLM's chat-style embeddings: one conversation, one vector
        items, found, system, at = messages_input(body, m, name, kinds.get(name, embed.EMBEDDER))
        if system is not None and asked is not None:
            raise ApiError(400, "give the instruction as the system message or as instruction, not both", param="instruction")
        if system is not None:
            check_bytes([system], m.max_text_bytes, "messages", name="the system message")
        if not found or isinstance(found[0], Fused):   # a text, alone or fused with the image
            check_bytes(items, m.max_text_bytes, "messages", name=f"messages[{at}]")
        return EmbeddingsRequest(model, name, items, None, fmt, opts, media=found, media_field="messages",
                                 instruction=system if system is not None else asked, item_names=(f"messages[{at}]",))
    if "input" not in body:
        raise ApiError(400, "you must provide an input parameter", param="input")
    inp = body["input"]
    if isinstance(inp, str) or (isinstance(inp, list) and inp and all(isinstance(x, str) for x in inp)):
        items = [inp] if isinstance(inp, str) else list(inp)
        if len(items) > max_items:
            raise ApiError(400, f"input has {len(items)} items; at most {max_items} per request", param="input")
        mods = modalities(body.get("modality"), len(items)) if "modality" in body else None
        found = media(items, mods, m, name, kinds.get(name, embed.EMBEDDER)) if mods is not None else ()
        if not found:   # every item a text (the hot path: one pass, as before images)
            check_bytes(items, m.max_text_bytes, "input")
        for k, x in enumerate(items if found else ()):
            if found[k] is None:
                check_bytes([x], m.max_text_bytes, "input", name=f"input[{k}]")
        return EmbeddingsRequest(model, name, items, None, fmt, opts, media=found,
                                 late=parse_late(body, items, "input", raw, max_items, found), instruction=asked)
    if body.get("modality") is not None:
        if any(x != "text" for x in modalities(body["modality"], len(inp) if isinstance(inp, list) else 1) or ()):
            raise ApiError(400, "images are data URI strings in input: token ids are texts' only", param="modality")
    if not isinstance(inp, list) or not inp:
        raise ApiError(400, "input must be a string, a non-empty list of strings, a list of token ids or a list "
                       "of token-id lists", param="input")
    if len(inp) > max_items:
        raise ApiError(400, f"input has {len(inp)} items; at most {max_items} per request", param="input")
    looks_like_ids = all(embed.is_int(x) for x in inp) or all(isinstance(x, list) for x in inp)
    parse_late(body, None, "input", raw, max_items)   # late chunking refused for token ids, where asked for
    if looks_like_ids and not m.token_ids:
        raise ApiError(400, "token-id input is off on this gateway: ids are embedded as this model's own vocabulary, "
                       "and clients such as LangChain's OpenAIEmbeddings send ids of another one (tiktoken) by "
                       "default, which would give wrong vectors. Send text (LangChain: "
                       "check_embedding_ctx_length=False), or start the gateway with --token-ids if the ids are "
                       f"{name}'s own", param="input", code="token_ids_disabled")
    explicit_prompt = any(raw.get(k) is not None for k in ("prompt_name", "input_type"))
    if explicit_prompt and opts.prompt and looks_like_ids:
        raise ApiError(400, "token-id input is embedded as given: a prompt (prompt_name / input_type) applies "
                       "to text input only", param="input")
    if all(embed.is_int(x) for x in inp):
        return request(None, [embed.ids_of(inp, 0, name, m)])
    if all(isinstance(x, list) for x in inp):
        return request(None, [embed.ids_of(x, i, name, m) for i, x in enumerate(inp)])
    raise ApiError(400, "input items must all be strings, all token ids, or all token-id lists", param="input")


def render_embed(req: EmbeddingsRequest, vecs, tokens: int) -> Answer:
    """One request's vectors in OpenAI's list: base64 (float32 little-endian, or the raw int8 / uint8
    bytes of the compact types) or the arrays themselves (orjson writes numpy without a Python
    float per value)."""
    if req.encoding_format == "base64":
        raw_vecs = vecs.astype("<f4") if vecs.dtype == "float32" else vecs
        data = [{"object": "embedding", "index": i,
                 "embedding": base64.b64encode(v.tobytes()).decode("ascii")} for i, v in enumerate(raw_vecs)]
    else:
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vecs)]
    return ({"object": "list", "data": data, "model": req.model,
             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}, len(data) * 1536, [])


async def answer_embed(model, req: EmbeddingsRequest) -> Answer:
    vecs, tokens = await embed.vectors(model, req)
    return render_embed(req, vecs, tokens)


def parse_embed(models: Mapping[str, EmbeddingsModel], kinds: Mapping[str, Kind], cfg, path: str, body: Any) -> EmbeddingsRequest:
    if path == "/embeddings":   # TEI's and infinity's spelling, whose clients may send no model
        return parse_embeddings(body, models, cfg.max_items, kinds, optional=True, default=cfg.default_model)
    return parse_embeddings(body, models, cfg.max_items, kinds)


SHAPES = {("embed", "openai"): Shape(parse_embed, answer_embed)}
