"""The embed_sparse operation (#69 item 2): what every sparse route's request is, whatever its dialect (TEI's
/embed_sparse: dialects/tei.py; embtrt's /v1/sparse: dialects/embtrt.py), and what a model serving it is asked.

The options are resolved as the front door resolves them (the sparse-weights head's
embtrt_backend.sparse_weights.resolve, one rule on every surface), so a bad one is a 400 naming its field
before anything goes upstream; `dimensions` and `embedding_type` do not apply to sparse vectors and are refused.
Fields the gateway does not read are ignored, as /v1/embeddings ignores them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from embtrt_backend.kinds import Kind, of_operation

from ..errors import ApiError, check_bytes, model_name, no_such_model, short
from ..operation import Answer, Declared

if TYPE_CHECKING:  # the serving-side package, imported where it is used
    from embtrt_backend.options import ModelOptions, RequestOptions

NAME, LATENCY = "embed_sparse", "sparse_latency"
NEEDS = (("encode",),)
ENCODER = of_operation(NAME)   # the kind its messages name
OPERATIONS = (Declared(NAME, ENCODER.metric_route, LATENCY, NEEDS),)


@dataclass(frozen=True)
class SparseModel:
    """What parsing a sparse request needs to know of one served model."""

    options: ModelOptions            # the front door's own (prompts, default prompt)
    max_text_bytes: int              # the most UTF-8 bytes of a text (the front door's limit)


@dataclass(frozen=True)
class SparseRequest:
    """A valid sparse request of either shape: the texts, the front door's request parameters, and
    the options they resolve to (the prompt and truncation, for admission's token count)."""

    api: str                         # tei | embtrt: the shape of the response
    model: str | None                # as the client sent it (echoed); None where it sent none (TEI)
    served: str                      # the served model it names
    texts: list[str]
    options: RequestOptions
    max_active_dims: int | None = None
    parameters: dict[str, str | int] = field(default_factory=dict)   # sent to the front door as they are
    return_tokens: bool = False      # /v1/sparse: each active dimension's vocabulary token too


def encoder(body: dict, models: Mapping[str, SparseModel], kinds: Mapping[str, Kind], optional: bool,
            default: str | None) -> tuple[str, SparseModel]:
    """(the served name, its schema) of a body's `model` (optional on TEI's route where one is served); 400 for
    another kind's (model_name), 404 where none answers."""
    name = model_name(body.get("model"), models, kinds, ENCODER, optional=optional, none_404=True, default=default)
    m = models.get(name)
    if m is None:
        raise no_such_model(name, models, ENCODER, "encodes sparse vectors with")
    return name, m


def texts(inp: object, key: str, max_items: int) -> list[str]:
    """A string or a non-empty list of strings (an empty string is a text: SparseEncoder encodes it)."""
    if inp is None:
        raise ApiError(400, f"you must provide an {key} parameter", param=key)
    if isinstance(inp, str):
        return [inp]
    if not isinstance(inp, list) or not inp:
        raise ApiError(400, f"{key} must be a string or a non-empty list of strings", param=key,
                       code="empty" if inp == [] else None)
    if len(inp) > max_items:
        raise ApiError(400, f"{key} has {len(inp)} items; at most {max_items} per request", param=key)
    for i, t in enumerate(inp):
        if not isinstance(t, str):
            raise ApiError(400, f"{key}[{i}] must be a string, got {short(t)}", param=key)
    return list(inp)


def request(api: str, body: dict, name: str, m: SparseModel, items: list[str], key: str, raw: dict,
            return_tokens: bool = False) -> SparseRequest:
    """The request, its front-door parameters `raw` resolved as the front door resolves them (a 400 naming the
    field), its texts' sizes checked."""
    from embtrt_backend import InputError
    from embtrt_backend.sparse_weights import resolve

    try:
        resolved = resolve(m.options, raw)   # (options, max_active_dims, ...): what the front door reads first
    except InputError as exc:
        raise ApiError(400, str(exc), param=exc.param) from None
    if isinstance(raw.get("truncate"), str):
        raw["truncate"] = raw["truncate"].upper()
    check_bytes(items, m.max_text_bytes, key)
    return SparseRequest(api, body.get("model"), name, items, resolved[0], resolved[1], raw, return_tokens)


Rows = list[tuple[np.ndarray, np.ndarray]]   # each text's (indices ascending, values), in input order


def answerer(render: Callable[[SparseRequest, Rows, int, Callable[[int], str | None] | None], tuple[Any, list]]):
    """The answer of a sparse shape whose response `render` writes: (request, rows, tokens, a vocabulary index's token)."""
    async def answer(model, req: SparseRequest) -> Answer:
        rows, tokens = await model.encode(req)
        doc, headers = render(req, rows, tokens, model.served.token_of)
        return doc, 32 * sum(len(ix) for ix, _ in rows), headers
    return answer
