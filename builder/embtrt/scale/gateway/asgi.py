"""The gateway's ASGI plumbing shared by its handlers (http.py, anchors.py): JSON in and out, a
JSON response, a deadline, the API key."""

import asyncio
import hmac
import json
import sys

from .config import GatewayConfig
from .errors import ApiError


def _loads(raw: bytes):
    try:
        import orjson
    except ImportError:
        return json.loads(raw)
    return orjson.loads(raw)


def _dumps(doc: dict) -> bytes:
    """JSON bytes; numpy arrays as lists (orjson serializes them natively, far cheaper than tolist())."""
    try:
        import orjson
    except ImportError:
        return json.dumps(doc, default=lambda a: a.tolist()).encode()
    return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)


async def _respond(send, status: int, payload: bytes, headers: list) -> None:
    """A JSON response: the status, its length, `headers` beside them, the payload."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": payload})


async def _within(seconds: float, coro):
    """await coro, cancelled after `seconds` (asyncio.TimeoutError): asyncio.timeout where there is one
    (Python 3.11), which runs the coroutine in the caller's task; wait_for makes a task per request."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await coro
    return await asyncio.wait_for(coro, seconds)


def check_key(cfg: GatewayConfig, auth: str) -> None:
    """401 unless the request carries the gateway's API key (where it has one) as a bearer token."""
    if cfg.api_key is None:
        return
    token = auth[7:] if auth.lower().startswith("bearer ") else ""
    if not token or not hmac.compare_digest(token.encode(), cfg.api_key.encode()):
        raise ApiError(401, "incorrect or missing API key (send Authorization: Bearer <key>)",
                       code="invalid_api_key")


def check_length(cfg: GatewayConfig, headers: dict) -> None:
    """413 where the request says (Content-Length) its body is over --max-body-bytes, before reading it."""
    size = headers.get(b"content-length", b"").decode("latin-1")
    if size.isdigit() and int(size) > cfg.max_body_bytes:
        raise ApiError(413, f"request body of {size} bytes is over the limit of {cfg.max_body_bytes} bytes")
