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

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
