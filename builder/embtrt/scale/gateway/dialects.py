"""Each API dialect's error body and status, and TEI's response headers (#51).

A route speaks one dialect (routes.py: an operation's `routes` map each POST path to one); an error on
it is answered in that dialect's shape, so the anchor's own client reads it as it reads the anchor's:

- `openai` (and every dialect without its own: NIM's, embtrt's, the rerank APIs' `cohere`):
  `{"error": {message, type, param, code}}` with the gateway's status;
- `tei*` (Hugging Face TEI 1.9): `{"error", "error_type"}`, PascalCase types, TEI's statuses: an empty
  input 400 `Empty`; a bad field, an unknown model or a batch over --max-items 422 `Validation` (TEI
  1.8 and older answered 413); a model that does not serve the route 424 `Backend` (TEI: "Model is not
  an embedding model"), as an upstream failure; 429 `Overloaded`; 503 `Unhealthy`; the size caps 413;
- `cohere-*` (Cohere's embed API): `{"message"}` with the status;
- `vllm*`: vLLM's `{"error": {message, type, param, code}}`, `type` its exception's name and `code`
  the status.

A parser that recognises another anchor's body on a shared path (vLLM's /rerank or /tokenize body)
sets the error's `dialect`; otherwise a body that cannot be parsed gets the path's own.
"""

from __future__ import annotations

from typing import Any

from .errors import ApiError, short

TEI_TYPES = {400: "Validation", 401: "Unauthorized", 404: "Validation", 408: "Validation", 413: "Validation",
             429: "Overloaded", 499: "Validation", 503: "Unhealthy", 504: "Backend"}
VLLM_TYPES = {400: "BadRequestError", 401: "UnauthorizedError", 404: "NotFoundError", 408: "RequestTimeoutError",
              413: "BadRequestError", 422: "UnprocessableEntityError", 429: "TooManyRequestsError",
              501: "NotImplementedError", 503: "ServiceUnavailableError", 504: "GatewayTimeoutError"}
BACKEND_CODES = ("wrong_model_kind", "wrong_operation")   # TEI: the model cannot serve the route
# where each dialect's body holds its items: a rerank body's documents, a sparse body's texts (the field a
# parser or an upstream refusal names)
DOC_FIELDS = {"cohere": "documents", "tei": "texts", "nim": "passages"}
INPUT_FIELDS = {"tei": "inputs", "embtrt": "input"}
# the dialects of TEI's model routes, which send its x-compute-* headers (its /tokenize and /decode send none)
TIMED = frozenset({"tei", "tei-all", "tei-similarity"})


def family(dialect: str) -> str:
    """tei | cohere | vllm | openai: whose error shape a dialect answers in."""
    for f in ("tei", "cohere-", "vllm"):
        if dialect.startswith(f):
            return f.rstrip("-")
    return "openai"


def render_error(exc: ApiError, dialect: str) -> tuple[int, dict]:
    """(status, body) of an error on a route of `dialect` (the error's own dialect first, where its parser set one)."""
    f = family(exc.dialect or dialect)
    if f == "tei":
        if exc.code == "empty":
            return 400, {"error": exc.message, "error_type": "Empty"}
        if exc.code in BACKEND_CODES or exc.status in (500, 502):
            return 424, {"error": exc.message, "error_type": "Backend"}
        status = 422 if exc.status in (400, 404) else exc.status
        return status, {"error": exc.message, "error_type": TEI_TYPES.get(exc.status, "Validation")}
    if f == "cohere":
        return exc.status, {"message": exc.message}
    if f == "vllm":
        return exc.status, {"error": {"message": exc.message, "type": VLLM_TYPES.get(exc.status, "InternalServerError"),
                                      "param": exc.param, "code": exc.status}}
    return exc.status, exc.body()


def tei_headers(tokens: int, characters: int) -> list[tuple[bytes, bytes]]:
    """TEI's x-compute-tokens and x-compute-characters (the handler adds its type and times)."""
    return [(b"x-compute-tokens", str(tokens).encode()), (b"x-compute-characters", str(characters).encode())]


def tei_timing(ms: float) -> list[tuple[bytes, bytes]]:
    """TEI's x-compute-type and its total time headers (milliseconds, both the same as TEI's)."""
    t = str(int(ms)).encode()
    return [(b"x-compute-type", b"embtrt"), (b"x-compute-time", t), (b"x-total-time", t)]


DIRECTIONS = {"right": "END", "left": "START"}   # TEI's truncation_direction -> the front door's truncate


def tei_truncation(truncate: Any, direction: Any) -> str | None:
    """TEI's truncate (bool or null) and truncation_direction -> the front door's truncate (None: the build's)."""
    if direction is None:
        direction = "right"
    if not isinstance(direction, str) or direction.lower() not in DIRECTIONS:
        raise ApiError(400, f"truncation_direction must be 'right' or 'left', not {short(direction)}",
                       param="truncation_direction")
    if truncate is not None and not isinstance(truncate, bool):
        raise ApiError(400, f"truncate must be true, false or null, got {short(truncate)}", param="truncate")
    if truncate is False:
        return "NONE"
    if truncate is None and direction.lower() == "right":
        return None
    return DIRECTIONS[direction.lower()]
