"""OpenAI's POST /v1/embeddings request: the body parsed and validated once, by pure functions
that need no server (only what each model allows: its options, vocabulary size, max length and
max text bytes), into a small frozen `EmbeddingsRequest`.

`model` is the served name, or NAME-query / NAME-passage / NAME-document (input_type) or
NAME-<prompt> (prompt_name), for OpenAI clients that send no extra fields. `input` is a string,
a list of strings, a list of token ids, or a list of token-id lists; token ids are the model's own
(special tokens included), must be in its vocabulary and fit its max length, and are never prompted.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from embtrt_backend.kinds import EMBEDDER, Kind

from ...scale.gateway.errors import NO_KINDS, ApiError, check_bytes, model_name
from ...scale.gateway.operation import Answer
from ...scale.gateway.images import Fused, instruction, media, messages_input, modalities, takes_images
from .scale_late import Late, parse as parse_late

if TYPE_CHECKING:  # the serving-side package, imported where it is used (as served.py does through common.backend)
    from embtrt_backend.options import ModelOptions, RequestOptions

ENCODING_FORMATS = ("float", "base64")
INPUT_TYPE_ALIASES = ("query", "passage", "document")  # NAME-<input_type>


@dataclass(frozen=True)
class EmbeddingsModel:
    """What parsing a request for one served model needs to know of it."""

    options: ModelOptions
    vocab_size: int
    max_len: int                     # the most tokens of a token-id item
    max_text_bytes: int              # the most UTF-8 bytes of a text (the front door's limit)
    route: str = "ids"               # the gateway's route for it: "text" takes the default prompt and truncation only
    token_ids: bool = False          # token-id input accepted (--token-ids): the model's own vocabulary only


@dataclass(frozen=True)
class EmbeddingsRequest:
    """A valid /v1/embeddings request: texts or token-id lists (one of them is None), the response's
    encoding and the model's request options resolved."""

    model: str                       # as the client sent it (the response echoes it)
    served: str                      # the served model it names
    texts: list[str] | None
    ids: list[list[int]] | None
    encoding_format: str
    options: RequestOptions
    api: str = "openai"              # the dialect of the response: openai | tei | similarity | cohere-v1 | cohere-v2
    normalize: bool = False          # TEI's normalize: L2-normalized whether or not the model normalizes
    # Cohere's embedding_types: each type's name and the options it is finished with (from the float vectors)
    types: tuple[tuple[str, RequestOptions], ...] = ()
    # a text-and-image model's request: per item an image's encoded bytes, or None where texts[k] is a text
    # (scale.gateway.images); () where every item is a text
    media: tuple = ()
    media_field: str = "input"       # the body's field of those items (Cohere: images or inputs), in errors
    late: Late | None = None         # late chunking (scale_late.py): the document and its chunks' spans
    instruction: str | None = None   # a VLM embedder's instruction for this request (None: the model's default)
    item_names: tuple[str, ...] = ()   # each item's name in errors where it is not media_field[k] (a message's index)


def model_suffixes(options: ModelOptions) -> list[str]:
    """The NAME-<suffix> aliases a model answers to: input types its prompts serve, and its prompts."""
    o = options
    out = [t for t in INPUT_TYPE_ALIASES if any(n in o.prompts for n in ("passage", "document"))
           or t == "query"] if o.prompts else []
    return sorted(set(out) | set(o.prompts)) if o.prompts else []


def _alias(model: str, name: str, options: ModelOptions) -> dict | None:
    """The options `model` (NAME-<suffix>) carries for the model `name`, or None where it is not one of its names."""
    if not model.startswith(name + "-"):
        return None
    suffix = model[len(name) + 1:]
    if suffix in INPUT_TYPE_ALIASES:
        return {"input_type": suffix}
    if suffix in options.prompts:
        return {"prompt_name": suffix}
    return None


def resolve_model(model: object, models: Mapping[str, EmbeddingsModel],
                  kinds: Mapping[str, Kind] = NO_KINDS, optional: bool = False, default: str | None = None) -> tuple[str, dict]:
    """The body's `model` -> (the served model's name, the options its name carries); 400 where it is
    missing (unless `optional`: errors.model_name), not a string, or a model of another kind, 404 where
    no model answers to it."""
    model = model_name(model, models, kinds, EMBEDDER, optional, default=default)
    if model in models:
        return model, {}
    for name, m in models.items():
        raw = _alias(model, name, m.options)
        if raw is not None:
            return name, raw
    names = ", ".join(f"{n!r}" for n in models) or "no embedder"
    aliases = [f"{n}-{x}" for n, m in models.items() for x in model_suffixes(m.options)]
    raise ApiError(404, f"the model {model!r} does not exist; this gateway serves {names}"
                   + (f" (also as {', '.join(aliases)})" if aliases else ""), param="model", code="model_not_found")


def parse_embeddings(body: Any, models: Mapping[str, EmbeddingsModel], max_items: int,
                     kinds: Mapping[str, Kind] = NO_KINDS, optional: bool = False,
                     default: str | None = None) -> EmbeddingsRequest:
    """A decoded JSON body -> EmbeddingsRequest, or ApiError (400, or 404 for an unknown model) naming
    the parameter at fault; a reranker's or sparse encoder's name (`rerankers`, `sparse`) is a 400 naming
    the routes that serve it. `optional`: a body without `model` goes to the only embedder, else to
    `default` (POST /embeddings, TEI's and infinity's path, whose clients may send none)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    name, raw = resolve_model(body.get("model"), models, kinds, optional, default)
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
    opts = request_options(m, raw)

    def request(texts: list[str] | None, ids: list[list[int]] | None) -> EmbeddingsRequest:
        return EmbeddingsRequest(model, name, texts, ids, fmt, opts)

    asked = instruction(body, m, name)
    if body.get("messages") is not None:   # vLLM's chat-style embeddings: one conversation, one vector
        items, found, system, at = messages_input(body, m, name, kinds.get(name, EMBEDDER))
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
        found = media(items, mods, m, name, kinds.get(name, EMBEDDER)) if mods is not None else ()
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
    looks_like_ids = all(_is_int(x) for x in inp) or all(isinstance(x, list) for x in inp)
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
    if all(_is_int(x) for x in inp):
        return request(None, [_ids(inp, 0, name, m)])
    if all(isinstance(x, list) for x in inp):
        return request(None, [_ids(x, i, name, m) for i, x in enumerate(inp)])
    raise ApiError(400, "input items must all be strings, all token ids, or all token-id lists", param="input")


def request_options(m: EmbeddingsModel, raw: dict, names: Mapping[str, str] | None = None) -> RequestOptions:
    """The model's options for a request's parameters (OPTION_NAMES), or a 400 naming the field at fault
    (`names`: the field a parameter came from in the route's dialect, where it is spelt otherwise)."""
    from embtrt_backend import InputError

    def field(p: str | None) -> str | None:
        return (names or {}).get(p or "", p)

    if isinstance(raw.get("dimensions"), (float, str)):
        raise ApiError(400, f"{field('dimensions')} must be an integer, got {raw['dimensions']!r}",
                       param=field("dimensions"))
    try:
        opts = m.options.resolve(raw)
    except InputError as exc:
        raise ApiError(400, str(exc), param=field(exc.param)) from None
    if m.route == "text" and (opts.prompt_name != m.options.default.prompt_name or opts.truncate):
        raise ApiError(400, "this gateway sends text to the bucket ensembles (--route text), which apply the "
                       "model's default prompt and truncation only; run it with --route ids for "
                       "prompt_name / input_type / truncate", param="prompt_name" if opts.prompt else "truncate")
    return opts


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _ids(ids: list, i: int, name: str, m: EmbeddingsModel) -> list[int]:
    if not ids or not all(_is_int(t) for t in ids):
        raise ApiError(400, f"input[{i}] must be a non-empty list of integer token ids", param="input")
    bad = [t for t in ids if not 0 <= t < m.vocab_size]
    if bad:
        raise ApiError(400, f"input[{i}]: token id {bad[0]} is outside the vocabulary (0..{m.vocab_size - 1})",
                       param="input")
    if len(ids) > m.max_len:
        raise ApiError(400, f"input[{i}] has {len(ids)} tokens; {name} takes at most "
                       f"{m.max_len} (token-id input is never truncated)", param="input")
    return [int(t) for t in ids]


def render(req: EmbeddingsRequest, vecs, tokens: int) -> Answer:
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

