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

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


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
