"""The sparse routes' bodies, pure (no server): two shapes parsed into one `SparseRequest`, and one
request's sparse vectors rendered back in the shape it came in.

- `tei`: Hugging Face TEI, POST /embed_sparse: `{inputs: str | [str], truncate?: bool,
  truncation_direction?: "right" | "left", prompt_name?}` (and an optional `model`, which TEI has not)
  -> `[[{index, value}, ...], ...]`, one list per input, indices ascending; the tokens in the header
  `x-compute-tokens`. `truncate` false is the front door's truncate NONE (an over-long text is a 400),
  true or absent END, with `truncation_direction` left START;
- `embtrt`: POST /v1/sparse: `{model, input: str | [str], input_type?: query | document | passage,
  prompt_name?, truncate?: END | START | NONE, max_active_dims?, return_tokens?: bool}` -> `{object:
  "list", model, data: [{object: "sparse_embedding", index, indices, values, tokens?}], usage:
  {prompt_tokens, total_tokens}}`; with return_tokens, `tokens` holds each active dimension's
  vocabulary token (as SparseEncoder.decode names them), in the order of `indices`.

The options are resolved here as the front door resolves them (embtrt_backend.kinds.sparse.weights.resolve, one rule
on every surface), so a bad one is a 400 naming its field before anything goes upstream; `dimensions`
and `embedding_type` do not apply to a sparse encoder and are refused. Fields the gateway does not read
are ignored, as /v1/embeddings ignores them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from embtrt_backend.kinds import SPARSE, Kind

from ...scale.gateway.dialects import DIRECTIONS, INPUT_FIELDS, tei_headers
from ...scale.gateway.errors import NO_KINDS, ApiError, check_bytes, flag, model_name, no_such_model, short
from ...scale.gateway.operation import Answer, Operation
from ...scale.gateway.route_table import dialect_of

if TYPE_CHECKING:  # the serving-side package, imported where it is used
    from embtrt_backend.options import ModelOptions, RequestOptions

# /v1/sparse's fields that are the front door's request parameters (embtrt_backend.kinds.sparse.weights.resolve)
PARAMETERS = ("input_type", "prompt_name", "truncate", "max_active_dims", "dimensions", "embedding_type")


@dataclass(frozen=True)
class SparseModel:
    """What parsing a sparse request needs to know of one served sparse encoder."""

    options: ModelOptions            # the front door's own (prompts, default prompt)
    max_text_bytes: int              # the most UTF-8 bytes of a text (the front door's limit)


@dataclass(frozen=True)
class SparseRequest:
    """A valid sparse request of either shape: the texts, the front door's request parameters, and
    the options they resolve to (the prompt and truncation, for admission's token count)."""

    api: str                         # tei | embtrt: the shape of the response
    model: str | None                # as the client sent it (echoed); None where it sent none (TEI)
    served: str                      # the served sparse encoder it names
    texts: list[str]
    options: RequestOptions
    max_active_dims: int | None = None
    parameters: dict[str, str | int] = field(default_factory=dict)   # sent to the front door as they are
    return_tokens: bool = False      # /v1/sparse: each active dimension's vocabulary token too


def parse_sparse(api: str, body: Any, models: Mapping[str, SparseModel], max_items: int,
                 kinds: Mapping[str, Kind] = NO_KINDS, default: str | None = None) -> SparseRequest:
    """A decoded JSON body of the `api` shape -> SparseRequest, or ApiError (400, or 404 for an unknown
    model) naming the field at fault."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    if api not in INPUT_FIELDS:
        raise ValueError(f"unknown sparse API {api!r}")
    # optional on TEI's route where one sparse encoder is served; 400 for another kind's (model_name), 404 where none answers
    name = model_name(body.get("model"), models, kinds, SPARSE, optional=api == "tei", none_404=True, default=default)
    m = models.get(name)
    if m is None:
        raise no_such_model(name, models, SPARSE, "encodes sparse vectors with")
    key = INPUT_FIELDS[api]
    texts = _texts(body.get(key), key, max_items)
    raw: dict[str, Any]
    if api == "tei":
        direction = body.get("truncation_direction", "right")
        if not isinstance(direction, str) or direction.lower() not in DIRECTIONS:
            raise ApiError(400, f"truncation_direction must be 'right' or 'left', not {direction!r}",
                           param="truncation_direction")
        raw = {"truncate": DIRECTIONS[direction.lower()] if flag(body, "truncate", True) else "NONE"}
        if body.get("prompt_name") is not None:
            raw["prompt_name"] = body["prompt_name"]
    else:
        raw = {k: body[k] for k in PARAMETERS if body.get(k) is not None}
    return_tokens = flag(body, "return_tokens", False) if api == "embtrt" else False
    from embtrt_backend import InputError
    from embtrt_backend.kinds.sparse.weights import resolve

    try:
        resolved = resolve(m.options, raw)   # (options, max_active_dims, ...): what the front door reads first
    except InputError as exc:
        raise ApiError(400, str(exc), param=exc.param) from None
    if isinstance(raw.get("truncate"), str):
        raw["truncate"] = raw["truncate"].upper()
    check_bytes(texts, m.max_text_bytes, key)
    return SparseRequest(api, body.get("model"), name, texts, resolved[0], resolved[1], raw, return_tokens)


def render(req: SparseRequest, rows: list[tuple[np.ndarray, np.ndarray]], tokens: int,
           token_of: Callable[[int], str | None] | None = None) -> tuple[Any, list[tuple[bytes, bytes]]]:
    """One request's vectors (each text's (indices ascending, values), in input order) -> (the response
    document in the request's shape, extra headers). `token_of`: a vocabulary index's token string
    (the model's tokenizer), for a request with return_tokens."""
    if req.api == "tei":  # TEI's body is the bare lists; the tokens in a header, as its other routes
        return ([[{"index": i, "value": v} for i, v in zip(ix.tolist(), val.tolist())] for ix, val in rows],
                tei_headers(tokens, sum(map(len, req.texts))))
    data: list[dict[str, Any]] = [{"object": "sparse_embedding", "index": n, "indices": ix.tolist(), "values": val.tolist()}
                                  for n, (ix, val) in enumerate(rows)]
    if req.return_tokens:
        if token_of is None:
            raise ValueError("return_tokens needs the model's vocabulary (token_of)")
        for d in data:
            d["tokens"] = [token_of(int(i)) for i in d["indices"]]
    return ({"object": "list", "model": req.model, "data": data,
             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}, [])


def _texts(inp: object, key: str, max_items: int) -> list[str]:
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


async def answer(model, req: SparseRequest) -> Answer:
    rows, tokens = await model.encode(req)
    doc, headers = render(req, rows, tokens, model.served.token_of)
    return doc, 32 * sum(len(ix) for ix, _ in rows), headers


def parse(models: Mapping[str, SparseModel], kinds: Mapping[str, Kind], cfg, path: str, body: Any) -> SparseRequest:
    """A body of the path's shape -> SparseRequest (the Operation row's parse, as every operation's)."""
    return parse_sparse(dialect_of(path), body, models, cfg.max_items, kinds, cfg.default_model)


OPERATIONS = (Operation("embed_sparse", SPARSE.metric_route, "sparse_latency", parse, answer, needs=(("encode",),)),)
