"""The gateway's one error type: an HTTP status and OpenAI's error envelope."""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from embtrt_backend.kinds import Kind

NO_KINDS: Mapping[str, Kind] = MappingProxyType({})   # no model of another kind to refuse


class ApiError(Exception):
    """An error answered in OpenAI's envelope with its HTTP status."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code
        self.retry_after = retry_after  # seconds, sent as Retry-After (429, 503)
        self.served: str | None = None   # the served model the request named, once known (metrics by model)
        self.headers: list[tuple[bytes, bytes]] = []   # sent with the error (405's Allow)
        self.dialect: str | None = None  # the body's own dialect where its parser knew it (dialects.render_error)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    @property
    def reason(self) -> str:
        """What the refusal metric counts it as: its code, else its type."""
        return self.code or self.type


def wrong_kind(model: str, kind: Kind, wanted: Kind) -> ApiError:
    """The 400 for `model` (of `kind`) named on a route of the `wanted` kind: it names the routes that
    serve it (Kind.served_routes)."""
    return ApiError(400, f"{model!r} is {kind.label}, not {wanted.label}: {kind.served_routes} serves it", param="model",
                    code="wrong_model_kind")


def refuse_other_kind(model: str, kinds: Mapping[str, Kind], wanted: Kind) -> None:
    """wrong_kind's 400 where `kinds` (served models' kinds by name) says `model` is of a kind that does not
    serve the operation of `wanted`'s routes (a kind serving several operations is served on each one's)."""
    kind = kinds.get(model)
    if kind is not None and wanted.operations[0] not in kind.operations:
        raise wrong_kind(model, kind, wanted)


def implied_model(models: Mapping, default: str | None) -> str | None:
    """The model a body naming none goes to: the only one of `models`, else `default` (the gateway's
    --default-model) where it is one of them; None where neither."""
    if len(models) == 1:
        return next(iter(models))
    return default if default is not None and default in models else None


def model_name(model: object, models: Mapping, kinds: Mapping[str, Kind], wanted: Kind, optional: bool = False,
               none_404: bool = False, default: str | None = None) -> str:
    """The body's `model`, a string not naming a model of another kind (refuse_other_kind); where it is
    missing and `optional` (TEI's bodies have none), the only model of `models`, else `default` (the
    gateway's --default-model) where it is one of them, else a 400 naming them (or with `none_404` and
    no model, a 404)."""
    if model is None:
        implied = implied_model(models, default) if optional else None
        if implied is not None:
            return implied
        if optional and not models:   # TEI: a model that cannot serve the route (424)
            raise ApiError(404 if none_404 else 400, f"this gateway serves no {wanted.noun}", param="model",
                           code="wrong_operation")
        several = f" (this gateway serves several {wanted.noun}s: {', '.join(map(repr, models))})" if optional else ""
        raise ApiError(400, f"you must provide a model parameter{several}", param="model")
    if not isinstance(model, str):
        raise ApiError(400, "model must be a string", param="model")
    refuse_other_kind(model, kinds, wanted)
    return model


def no_such_model(model: str, models: Mapping, wanted: Kind, does: str) -> ApiError:
    """The 404 for a `model` no model of `wanted`'s kind answers to ("this gateway `does` NAME, ...")."""
    return ApiError(404, f"the model {model!r} does not exist; this gateway {does} {', '.join(map(repr, models)) or f'no {wanted.noun}'}",
                    param="model", code="model_not_found")


def json_object(body: object) -> dict:
    """A request's decoded JSON body, which every shape takes as an object; a 400 otherwise."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def empty(field: str, what: str = "list") -> ApiError:
    """The 400 for an empty `field` (TEI answers it as `Empty`)."""
    return ApiError(400, f"{field} must be a non-empty {what}", param=field, code="empty")


def text_list(value: object, field: str, max_items: int, *, single: bool = True, tei: bool = False,
              hint: str = "") -> list[str]:
    """A request's texts: a string (where `single`: one text) or a non-empty list of strings, at most
    `max_items` (over it: TEI's words where `tei`); a 400 naming `field` otherwise (an empty list is
    TEI's `Empty`). `hint` ends the wrong-type message."""
    if value is None:
        raise ApiError(400, f"you must provide {'an' if field[0] in 'aeiou' else 'a'} {field} parameter", param=field)
    texts = [value] if single and isinstance(value, str) else value
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise ApiError(400, f"{field} must be {'a string or ' if single else ''}a list of strings{hint}", param=field)
    if not texts:
        raise empty(field)
    if len(texts) > max_items:
        raise ApiError(400, f"batch size {len(texts)} > maximum allowed batch size {max_items}" if tei
                       else f"{field} has {len(texts)} items; at most {max_items} per request", param=field)
    return list(texts)


def flag(body: dict, key: str, default: bool) -> bool:
    """body[key], true or false (absent or null: `default`); a 400 naming it otherwise."""
    v = body.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ApiError(400, f"{key} must be true or false, got {v!r}", param=key)
    return v


def short(x: object) -> str:
    r = repr(x)
    return r if len(r) <= 60 else r[:57] + "..."


def check_bytes(texts: list[str], limit: int, field: str, name: str | None = None) -> None:
    """A 400 naming the first text over `limit` UTF-8 bytes (the front door's limit): `name`, else field[i]."""
    for i, t in enumerate(texts):
        if len(t) * 4 > limit and len(t.encode("utf-8")) > limit:  # len(t) * 4 bounds its UTF-8 size
            raise ApiError(400, f"{name or f'{field}[{i}]'} is {len(t.encode('utf-8'))} bytes of UTF-8, over the limit of "
                           f"{limit} bytes per text", param=field)
