"""The embed operation (#69 item 2): what every embed route's request is, whatever its dialect (OpenAI's
/v1/embeddings and /embeddings with NIM's, infinity's and vLLM's fields: dialects/openai.py; TEI's /embed and
/similarity: tei.py; Cohere's /v1/embed and /v2/embed: cohere.py), parsed once into a small frozen
`EmbeddingsRequest` by pure functions that need no server (only what each model allows: its options, vocabulary
size, max length and max text bytes), and what a model serving it is asked.

`model` is the served name, or NAME-query / NAME-passage / NAME-document (input_type) or NAME-<prompt>
(prompt_name), for OpenAI clients that send no extra fields. Token ids are the model's own (special tokens
included), must be in its vocabulary and fit its max length, and are never prompted. Request options are
resolved here, once (request_options: the model's own ModelOptions.resolve).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from embtrt_backend.kinds import Kind, of_operation

from ..errors import NO_KINDS, ApiError, model_name
from ..operation import Declared
from .late import Late

if TYPE_CHECKING:  # the serving-side package, imported where it is used (as served.py does through common.backend)
    from embtrt_backend.options import ModelOptions, RequestOptions

NAME = "embed"
EMBEDDER = of_operation(NAME)   # the kind its messages name ("no embedder")
OPERATIONS = (Declared(NAME, EMBEDDER.metric_route, "latency", needs=(("embed",),)),)
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
    late: Late | None = None         # late chunking (late.py): the document and its chunks' spans
    instruction: str | None = None   # a VLM embedder's instruction for this request (None: the model's default)
    item_names: tuple[str, ...] = ()   # each item's name in errors where it is not media_field[k] (a message's index)


def model_suffixes(options: ModelOptions) -> list[str]:
    """The NAME-<suffix> aliases a model answers to: input types its prompts serve, and its prompts."""
    o = options
    out = [t for t in INPUT_TYPE_ALIASES if any(n in o.prompts for n in ("passage", "document"))
           or t == "query"] if o.prompts else []
    return sorted(set(out) | set(o.prompts)) if o.prompts else []


def alias(model: str, name: str, options: ModelOptions) -> dict | None:
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
        raw = alias(model, name, m.options)
        if raw is not None:
            return name, raw
    names = ", ".join(f"{n!r}" for n in models) or "no embedder"
    aliases = [f"{n}-{x}" for n, m in models.items() for x in model_suffixes(m.options)]
    raise ApiError(404, f"the model {model!r} does not exist; this gateway serves {names}"
                   + (f" (also as {', '.join(aliases)})" if aliases else ""), param="model", code="model_not_found")


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


def is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def ids_of(ids: list, i: int, name: str, m: EmbeddingsModel) -> list[int]:
    if not ids or not all(is_int(t) for t in ids):
        raise ApiError(400, f"input[{i}] must be a non-empty list of integer token ids", param="input")
    bad = [t for t in ids if not 0 <= t < m.vocab_size]
    if bad:
        raise ApiError(400, f"input[{i}]: token id {bad[0]} is outside the vocabulary (0..{m.vocab_size - 1})",
                       param="input")
    if len(ids) > m.max_len:
        raise ApiError(400, f"input[{i}] has {len(ids)} tokens; {name} takes at most "
                       f"{m.max_len} (token-id input is never truncated)", param="input")
    return [int(t) for t in ids]


def optional_model(body: dict, models: Mapping[str, EmbeddingsModel], kinds: Mapping[str, Kind], cfg) -> tuple[str, str, dict]:
    """(the model as sent or served, the served name, the options its name carries) of a body whose `model` is optional."""
    if body.get("model") is None:
        name = model_name(None, models, kinds, EMBEDDER, optional=True, default=cfg.default_model)
        return name, name, {}
    name, raw = resolve_model(body["model"], models, kinds)
    return body["model"], name, raw


def unit(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.float32, copy=False)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def vectors(model, req: EmbeddingsRequest) -> Awaitable[tuple[Any, int]]:
    """The model's vectors of the request (as its options ask; Cohere's by type: full-width floats) and its tokens:
    the model's own coroutine, for the dialect's answer to await."""
    if req.late is not None:   # one pass over the document, each chunk pooled from its own tokens
        late_chunks = getattr(model, "late_chunks", None)
        if late_chunks is None:
            raise ApiError(400, f"late chunking is served for text embedders; {req.served} is a {model.kind.name}",
                           param="late_chunking")
        return late_chunks(req.late.document, list(req.late.spans), req.options, req.late.field)
    if req.instruction is not None or req.item_names:   # a VLM embedder's items: the request's instruction, names
        return model.embed_items(req.texts, req.media, req.options, req.media_field, req.instruction, req.item_names)
    if req.media:   # a text-and-image model's images (and texts), each item in its own modality
        return model.embed_items(req.texts, req.media, req.options, req.media_field)
    return model.embed(req.texts, req.ids, req.options)
