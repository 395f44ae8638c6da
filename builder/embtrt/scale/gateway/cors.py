"""CORS for browser clients (TEI's --cors-allow-origin): off unless origins are given, and then only
requests that carry an Origin header pay for it. A preflight (OPTIONS with Access-Control-Request-Method)
from an allowed origin is answered 204 with the methods and headers a client may send; every response to
an allowed origin carries Access-Control-Allow-Origin; other origins get no CORS header (the browser
refuses the response) and a preflight from one 403."""

from __future__ import annotations

METHODS = b"GET, POST, OPTIONS"
MAX_AGE = b"600"


def _header(scope, name: bytes) -> bytes | None:
    for k, v in scope.get("headers", ()):
        if k == name:
            return v
    return None


class Cors:
    def __init__(self, app, origins: tuple[str, ...]) -> None:
        self.app = app
        self.any = "*" in origins
        self.origins = {o.rstrip("/").encode() for o in origins if o != "*"}

    def __getattr__(self, name: str):   # the wrapped app's attributes (its gateway) stay reachable
        return getattr(self.app, name)

    def allowed(self, origin: bytes) -> bool:
        return self.any or origin.rstrip(b"/") in self.origins

    async def __call__(self, scope, receive, send) -> None:
        origin = _header(scope, b"origin") if scope["type"] == "http" else None
        if origin is None:
            await self.app(scope, receive, send)
            return
        ok = self.allowed(origin)
        allow = [(b"access-control-allow-origin", b"*" if self.any else origin), (b"vary", b"Origin")]
        if scope["method"] == "OPTIONS" and _header(scope, b"access-control-request-method") is not None:
            asked = _header(scope, b"access-control-request-headers") or b"authorization, content-type"
            headers = [*allow, (b"access-control-allow-methods", METHODS), (b"access-control-allow-headers", asked),
                       (b"access-control-max-age", MAX_AGE), (b"content-length", b"0")] if ok else [(b"content-length", b"0")]
            await send({"type": "http.response.start", "status": 204 if ok else 403, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        if not ok:
            await self.app(scope, receive, send)
            return

        async def send_allowed(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *allow]}
            await send(message)

        await self.app(scope, receive, send_allowed)
