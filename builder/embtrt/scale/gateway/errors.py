"""The gateway's one error type: an HTTP status and OpenAI's error envelope."""

from __future__ import annotations


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


# the routes that serve each kind of model (the manifest's kind): a model named on another kind's route
# is refused with a 400 that names its own
KIND_ROUTES = {"embedder": "POST /v1/embeddings",
               "reranker": "POST /v1/rerank (Cohere, Jina, vLLM), /v2/rerank, /rerank (TEI) or /v1/ranking (NIM)",
               "sparse": "POST /v1/sparse or /embed_sparse (TEI)"}
_A = {"embedder": "an embedder", "reranker": "a reranker", "sparse": "a sparse encoder"}


def wrong_kind(model: str, kind: str, wanted: str) -> ApiError:
    """The 400 for `model` (of `kind`) named on a route of the `wanted` kind: it names the routes that serve it."""
    return ApiError(400, f"{model!r} is {_A[kind]}, not {_A[wanted]}: {KIND_ROUTES[kind]} serves it", param="model",
                    code="wrong_model_kind")
