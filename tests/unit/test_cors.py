"""#73: CORS (TEI's --cors-allow-origin): off by default; an allowed origin's preflight answered and its
responses marked; another origin's not. The wrapper around a stand-in ASGI app that records its calls."""

import asyncio

from embtrt.scale.gateway.cors import Cors


async def _app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}"})


def _call(app, method: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, dict[bytes, bytes]]:
    sent: list[dict] = []

    async def send(m):
        sent.append(m)

    async def receive():
        return {"type": "http.request", "body": b""}

    asyncio.run(app({"type": "http", "method": method, "path": "/v1/embeddings", "headers": headers}, receive, send))
    start = sent[0]
    return start["status"], dict(start["headers"])


def test_allowed_origins_get_cors_headers_and_preflight_answers_others_none():
    app = Cors(_app, ("https://app.example.com",))
    ok = [(b"origin", b"https://app.example.com")]
    status, h = _call(app, "POST", ok)
    assert status == 200 and h[b"access-control-allow-origin"] == b"https://app.example.com" and h[b"vary"] == b"Origin"
    status, h = _call(app, "OPTIONS", [*ok, (b"access-control-request-method", b"POST"),
                                       (b"access-control-request-headers", b"authorization, content-type")])
    assert status == 204 and b"POST" in h[b"access-control-allow-methods"]
    assert h[b"access-control-allow-headers"] == b"authorization, content-type"
    other = [(b"origin", b"https://evil.example")]
    status, h = _call(app, "POST", other)
    assert status == 200 and b"access-control-allow-origin" not in h
    status, h = _call(app, "OPTIONS", [*other, (b"access-control-request-method", b"POST")])
    assert status == 403 and b"access-control-allow-origin" not in h
    status, h = _call(app, "POST", [])   # no Origin: not a browser's cross-origin call
    assert status == 200 and b"access-control-allow-origin" not in h
    status, h = _call(Cors(_app, ("*",)), "POST", other)
    assert h[b"access-control-allow-origin"] == b"*"
